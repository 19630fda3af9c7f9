"""Near-duplicate detection with MinHash LSH (datasketch 2.x).

Generic over what the texts are (queries, trajectories, general SFT rows): texts in, clusters with
a representative out. Two ways to cut a text into shingles:

- character n-grams of the canonical text (the default): short texts such as queries, where
  Chinese needs no word segmentation;
- mixed, when ``word_ngram`` is set: word n-grams for Latin-script text and character n-grams
  for CJK text, for long texts such as trajectories, where short character n-grams of English
  would make everything look alike.

Shingles are hashed once to 32-bit integers (vectorised with numpy). The same hashes feed the
MinHash signatures (``MinHash.bulk`` with an identity hash function) and the exact Jaccard check,
which compares sorted hash arrays rather than string sets: 4 bytes per shingle, so the payloads
of 10^6 long texts fit in memory (or in Redis); two distinct shingles collide with probability
2^-32, far below anything that moves a similarity across a threshold.

LSH only proposes candidates; every candidate is confirmed by its Jaccard similarity, exact (on
the stored shingle hashes) or estimated from the signatures. datasketch's own band/row choice
finds a pair at exactly the threshold only ~40% of the time, so :func:`choose_lsh_params` picks
bands and rows for a target recall at the threshold instead; the extra candidates that costs are
removed by the verification step.

The index lives in memory, or in Redis (``storage_config``): datasketch keeps the LSH buckets
there and this module the verification payloads, so the index outlives the process and several
processes (or dataset versions) share it.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from agentune.tasks.common.rejects import KEEP, Verdict, drop

if TYPE_CHECKING:
    from agentune.tasks.orchestration.chunk_map import ChunkMap

Signed = list[tuple[str, np.ndarray, np.ndarray]]
"""``(key, shingle hashes, signature values)`` of every item of a batch."""

_SCHEME = "affine32"
_EMPTY_SIG = np.uint32(0xFFFFFFFF)
_SIGN_CHUNK = 1024
"""Shingles per signature step: a (chunk x num_perm) uint32 matrix, 512 KB at 128 permutations
(small enough for the CPU cache: larger chunks are slower)."""


def canonical_text(text: str) -> str:
    """What character shingles are cut from: NFKC, case-folded, no whitespace or punctuation."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(
        ch for ch in text if not (ch.isspace() or unicodedata.category(ch).startswith("P"))
    )


def shingles(text: str, ngram: int = 3) -> frozenset[str]:
    """The set of character n-grams of ``text`` (the whole text when it is shorter than n)."""
    if len(text) <= ngram:
        return frozenset({text})
    return frozenset(text[i : i + ngram] for i in range(len(text) - ngram + 1))


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# --------------------------------------------------------------------------- hashed shingles

_MULT = np.uint64(0x9E3779B97F4A7C15)
# Different start values keep word grams, character grams and mixed-mode character grams apart.
_SALT_CHARS = np.uint64(0x243F6A88)
_SALT_WORDS = np.uint64(0x85A308D3)
_SALT_CJK = np.uint64(0x13198A2E)
_EMPTY = np.zeros(0, dtype=np.uint32)
SHINGLE_SCHEME = 2
"""Version of the shingle hashing, stored with a Redis index: 2 hashes words with vectorised
per-position mixing (1 was crc32 per word); an index built with another refuses to open."""


def _gram_hashes(ids: np.ndarray, n: int, salt: np.uint64) -> np.ndarray:
    """64-bit polynomial hashes of every n-token window of ``ids`` (uint64); a sequence shorter
    than n is one gram. Arithmetic wraps modulo 2^64."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.uint64)
    n = min(n, ids.size)
    width = ids.size - n + 1
    h = np.full(width, salt, dtype=np.uint64)
    for i in range(n):
        h = h * _MULT + ids[i : i + width]
    return h


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser: datasketch's affine32 pre-mix of every input hash."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (numpy 2's hash-based unique is several times slower here)."""
    values = np.sort(values)
    if values.size < 2:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _to_hash32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, folded to 32 bits: sorted, unique uint32 shingle hashes."""
    h = _fmix64(h)
    return _sorted_unique((h ^ (h >> np.uint64(32))).astype(np.uint32))


def char_ngram_hashes(text: str, ngram: int) -> np.ndarray:
    """Hashes of the character n-grams of ``text`` as given (callers canonicalise first)."""
    if not text:
        return _EMPTY
    ids = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    return _to_hash32(_gram_hashes(ids, ngram, _SALT_CHARS))


# Character classes for the mixed tokeniser: 2 CJK, 1 word character (what the regex ``\w``
# matches, less ``_``: ``str.isalnum``), 0 anything else. A table over the Basic Multilingual
# Plane, built once (~20 ms); rarer code points are classified one by one.
_CLASS_CJK, _CLASS_WORD = 2, 1
_CJK_RANGES = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
               (0xAC00, 0xD7AF), (0x20000, 0x2FFFF))
_bmp_classes: np.ndarray | None = None


def _classes(cps: np.ndarray) -> np.ndarray:
    global _bmp_classes
    if _bmp_classes is None:
        table = np.fromiter((ch.isalnum() for ch in map(chr, range(0x10000))), dtype=np.uint8,
                            count=0x10000)
        for lo, hi in _CJK_RANGES:
            table[lo:min(hi, 0xFFFF) + 1] = _CLASS_CJK
        _bmp_classes = table
    astral = cps > 0xFFFF
    if not astral.any():
        return _bmp_classes[cps]
    classes = _bmp_classes[np.where(astral, 0, cps)]
    for i in np.flatnonzero(astral):
        cp = int(cps[i])
        classes[i] = (_CLASS_CJK if 0x20000 <= cp <= 0x2FFFF
                      else _CLASS_WORD if chr(cp).isalnum() else 0)
    return classes


def _batch_gram_hashes(tokens: np.ndarray, owner: np.ndarray, n_texts: int, n: int,
                       salt: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_gram_hashes` of many texts' token sequences at once: ``tokens`` are all texts'
    tokens one text after the other, ``owner`` the text index of each. Returns the gram hashes
    and the text each belongs to; every text's grams equal ``_gram_hashes`` of its tokens."""
    if tokens.size == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    hashes, owners = [], []
    if tokens.size >= n:
        width = tokens.size - n + 1
        h = np.full(width, salt, dtype=np.uint64)
        for i in range(n):
            h = h * _MULT + tokens[i : i + width]
        inside = owner[:width] == owner[n - 1:]  # windows within one text
        hashes.append(h[inside])
        owners.append(owner[:width][inside])
    counts = np.bincount(owner, minlength=n_texts)
    short = np.flatnonzero((counts > 0) & (counts < n))
    if short.size:  # fewer tokens than n: one gram of them all
        first = (np.cumsum(counts) - counts)[short]
        length = counts[short]
        h = np.full(short.size, salt, dtype=np.uint64)
        for i in range(int(length.max())):
            more = length > i
            h[more] = h[more] * _MULT + tokens[first[more] + i]
        hashes.append(h)
        owners.append(short)
    return np.concatenate(hashes), np.concatenate(owners)


def mixed_ngram_hash_sets(texts: Sequence[str], word_ngram: int,
                          char_ngram: int) -> list[np.ndarray]:
    """:func:`mixed_ngram_hashes` of every text, computed for all of them in one pass of a few
    dozen array operations (the per-text work is only Unicode normalisation)."""
    n = len(texts)
    if n == 0:
        return []
    normals = [unicodedata.normalize("NFKC", t).casefold() for t in texts]
    # One array of code points, texts separated by NUL (class "other": no word spans two texts).
    cps = np.frombuffer("\0".join(normals).encode("utf-32-le"), dtype=np.uint32)
    lengths = np.fromiter(map(len, normals), dtype=np.int64, count=n) + 1
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)[: cps.size]
    classes = _classes(cps)
    at = np.flatnonzero(classes == _CLASS_WORD)
    if at.size:
        starts = np.ones(at.size, dtype=bool)
        starts[1:] = np.diff(at) != 1
        first = np.flatnonzero(starts)
        offset = (np.arange(at.size, dtype=np.uint64)
                  - first[np.cumsum(starts) - 1].astype(np.uint64))
        # A word's hash: the wrapping sum of its characters, each mixed with its position.
        words = np.add.reduceat(_fmix64(cps[at].astype(np.uint64) + offset * _MULT + _SALT_WORDS),
                                first)
        word_owner = owner[at[first]]
    else:
        words, word_owner = np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    cjk = classes == _CLASS_CJK
    word_grams, word_owners = _batch_gram_hashes(words, word_owner, n, word_ngram, _SALT_WORDS)
    cjk_grams, cjk_owners = _batch_gram_hashes(cps[cjk].astype(np.uint64), owner[cjk], n,
                                               char_ngram, _SALT_CJK)
    h = _fmix64(np.concatenate([word_grams, cjk_grams]))
    h32 = (h ^ (h >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    # Sorted and unique per text in one sort: text index in the high half, hash in the low.
    keyed = _sorted_unique((np.concatenate([word_owners, cjk_owners]).astype(np.uint64)
                       << np.uint64(32)) | h32)
    bounds = np.searchsorted(keyed >> np.uint64(32), np.arange(n + 1, dtype=np.uint64))
    values = keyed.astype(np.uint32)
    return [values[bounds[i]:bounds[i + 1]] for i in range(n)]


def mixed_ngram_hashes(text: str, word_ngram: int, char_ngram: int) -> np.ndarray:
    """Hashes of word n-grams over the Latin-script words (letters and digits) of ``text`` and of
    character n-grams over its CJK characters; NFKC and case folding first, punctuation ignored.

    Vectorised: code points are classified with a table, each word is hashed as the wrapping sum
    of its characters mixed with their positions in the word, and the n-grams of word hashes
    (and of CJK characters) are rolling polynomial hashes."""
    return mixed_ngram_hash_sets([text], word_ngram, char_ngram)[0]


def hash_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, unique shingle-hash arrays."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Chance that LSH with ``bands`` x ``rows`` proposes a pair of this Jaccard similarity."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def choose_lsh_params(threshold: float, num_perm: int, min_recall: float = 0.99) -> tuple[int, int]:
    """(bands, rows) with at least ``min_recall`` chance of proposing a pair at ``threshold``,
    using as many rows per band as that allows (fewest false candidates to verify)."""
    if not 0 < threshold <= 1 or not 0 < min_recall < 1:
        raise ValueError("threshold must be in (0, 1] and min_recall in (0, 1)")
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if candidate_probability(threshold, bands, rows) >= min_recall:
            best = (bands, rows)
    return best


@dataclass(frozen=True)
class Match:
    key: str
    similarity: float


class MinHasher:
    """Shingle hashes and MinHash signatures with one fixed set of permutations.

    ``word_ngram=None``: character ``ngram``-grams of ``canonical(text)``. ``word_ngram=k``: word
    k-grams for Latin-script text and character ``ngram``-grams for CJK text (``canonical`` is
    then not used: the tokeniser drops punctuation and whitespace itself).

    Signatures are datasketch's ``affine32`` MinHash with the identity hash function (the
    shingle hashes are already hashes), bit for bit, computed for a whole batch of texts at once:
    one matrix product-and-minimum per few thousand shingles instead of one datasketch call per
    text.
    """

    def __init__(
        self,
        *,
        num_perm: int = 128,
        ngram: int = 3,
        word_ngram: int | None = None,
        seed: int = 1,
        canonical: Callable[[str], str] = canonical_text,
    ) -> None:
        if ngram < 1 or (word_ngram is not None and word_ngram < 1):
            raise ValueError("ngram and word_ngram must be >= 1")
        self.num_perm = num_perm
        self.ngram = ngram
        self.word_ngram = word_ngram
        self.seed = seed
        self.canonical = canonical
        a, b = MinHash(num_perm=num_perm, seed=seed, scheme=_SCHEME).permutations
        self._a, self._b = a.astype(np.uint32), b.astype(np.uint32)

    def shingle_hashes(self, text: str) -> np.ndarray:
        if self.word_ngram is None:
            return char_ngram_hashes(self.canonical(text), self.ngram)
        return mixed_ngram_hashes(text, self.word_ngram, self.ngram)

    def shingle_hash_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        """:meth:`shingle_hashes` of many texts (in one vectorised pass for mixed shingling)."""
        if self.word_ngram is None:
            return [self.shingle_hashes(t) for t in texts]
        return mixed_ngram_hash_sets(texts, self.word_ngram, self.ngram)

    def signature_matrix(self, hash_sets: Sequence[np.ndarray]) -> np.ndarray:
        """``(len(hash_sets), num_perm)`` uint32 signature values of already hashed shingle sets
        (an empty set gets the all-max signature, as in datasketch)."""
        out = np.full((len(hash_sets), self.num_perm), _EMPTY_SIG, dtype=np.uint32)
        i = 0
        while i < len(hash_sets):
            # A slice of sets with about _SIGN_CHUNK shingles in all (at least one set).
            j, total = i, 0
            while j < len(hash_sets) and (j == i or total + hash_sets[j].size <= _SIGN_CHUNK):
                total += hash_sets[j].size
                j += 1
            rows = [k for k in range(i, j) if hash_sets[k].size]
            if rows:
                flat = np.concatenate([hash_sets[k] for k in rows]).astype(np.uint32, copy=False)
                sizes = np.fromiter((hash_sets[k].size for k in rows), dtype=np.int64,
                                    count=len(rows))
                offsets = np.zeros(len(rows), dtype=np.int64)
                np.cumsum(sizes[:-1], out=offsets[1:])
                permuted = np.multiply.outer(_fmix32(flat), self._a)
                permuted += self._b
                out[rows] = np.minimum.reduceat(permuted, offsets, axis=0)
            i = j
        return out

    def minhashes(self, hash_sets: Iterable[np.ndarray]) -> list[LeanMinHash]:
        """Signatures of already hashed shingle sets, as datasketch objects."""
        return [self.lean(values) for values in self.signature_matrix(list(hash_sets))]

    def lean(self, values: np.ndarray) -> LeanMinHash:
        return LeanMinHash(seed=self.seed, hashvalues=values, scheme=_SCHEME)

    def signature(self, text: str) -> LeanMinHash:
        return self.signatures([text])[0]

    def signatures(self, texts: Iterable[str]) -> list[LeanMinHash]:
        return self.minhashes(self.shingle_hash_sets(list(texts)))

    def sign_batch(self, batch: Sequence[tuple[str, str]]) -> Signed:
        """Shingle hashes and signature values of every ``(key, text)``: the CPU-heavy part of
        dedup, pure, so it can run anywhere (a Dask worker) given this hasher."""
        hash_sets = self.shingle_hash_sets([text for _, text in batch])
        matrix = self.signature_matrix(hash_sets)
        return [(key, hashes, matrix[i]) for i, ((key, _), hashes)
                in enumerate(zip(batch, hash_sets, strict=True))]


# --------------------------------------------------------------------------- payload storage


class _Payloads(Protocol):
    """What verification needs about every indexed key: its insertion order and its array
    (shingle hashes for exact verification, signature values for estimates)."""

    def __len__(self) -> int: ...
    def __contains__(self, key: str) -> bool: ...
    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[int, np.ndarray]]: ...
    def put(self, key: str, values: np.ndarray) -> None: ...


class _MemoryPayloads:
    def __init__(self) -> None:
        self._data: dict[str, tuple[int, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[int, np.ndarray]]:
        return {k: self._data[k] for k in keys if k in self._data}

    def put(self, key: str, values: np.ndarray) -> None:
        self._data[key] = (len(self._data), values)


class _RedisPayloads:
    """A Redis hash ``<basename>_payloads``: key -> 8-byte order + little-endian uint32 values.
    The order comes from a counter (``<basename>_count``), atomic across processes."""

    def __init__(self, client: Any, basename: bytes) -> None:
        self._client = client
        self._hash = basename + b"_payloads"
        self._counter = basename + b"_count"

    def __len__(self) -> int:
        return int(self._client.hlen(self._hash))

    def __contains__(self, key: str) -> bool:
        return bool(self._client.hexists(self._hash, key))

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[int, np.ndarray]]:
        if not keys:
            return {}
        found = {}
        for key, raw in zip(keys, self._client.hmget(self._hash, list(keys)), strict=True):
            if raw is not None:  # an LSH entry whose writer died before its payload: ignore
                found[key] = (int.from_bytes(raw[:8], "big"), np.frombuffer(raw[8:], dtype="<u4"))
        return found

    def put(self, key: str, values: np.ndarray) -> None:
        order = int(self._client.incr(self._counter)) - 1
        self._client.hset(
            self._hash, key, order.to_bytes(8, "big") + values.astype("<u4").tobytes()
        )


def _redis_payloads(storage_config: Mapping[str, Any], settings: dict[str, Any]) -> _RedisPayloads:
    """Payload storage beside datasketch's Redis buckets; refuses an index built differently."""
    import redis  # only needed for a Redis-backed index

    basename = storage_config.get("basename")
    if not isinstance(basename, bytes) or not basename:
        raise ValueError(
            "a Redis-backed index needs storage_config['basename'] (bytes): the name under "
            "which later processes find it again"
        )
    client = redis.Redis(**storage_config.get("redis", {}))
    key = basename + b"_settings"
    wanted = json.dumps(settings, sort_keys=True)
    if not client.set(key, wanted, nx=True):
        raw = client.get(key)
        stored = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        if stored != wanted:
            raise ValueError(
                f"Redis index {basename.decode()!r} was built with {stored}, not {wanted}: "
                "use another basename or the same settings"
            )
    return _RedisPayloads(client, basename)


# --------------------------------------------------------------------------- LSH buckets


class _Buckets(Protocol):
    """Where LSH keeps its bands. ``bands_of`` turns a batch of signatures into whatever
    ``query`` and ``insert`` take for each (computed a batch at a time: cheaper)."""

    def bands_of(self, matrix: np.ndarray) -> Sequence[Any]: ...
    def query(self, bands: Any) -> Iterable[str]: ...
    def insert(self, key: str, bands: Any) -> None: ...


class _MemoryBuckets:
    """LSH bands in memory: one dict per band from the band's hash to the keys in that bucket.

    A band's hash is a random linear combination of its signature values modulo 2^64, so two
    different bands share a bucket only by a hash collision; such a key is one more candidate,
    and every candidate is verified. Same candidates as datasketch's in-memory index (up to
    those collisions), at a fraction of its cost per item.
    """

    def __init__(self, bands: int, rows: int) -> None:
        self.bands, self.rows = bands, rows
        rng = np.random.default_rng(0x5EED)
        self._mult = (rng.integers(0, 2**63, size=rows, dtype=np.uint64) * np.uint64(2)
                      + np.uint64(1))
        self._tables: list[dict[int, str | list[str]]] = [{} for _ in range(bands)]

    def bands_of(self, matrix: np.ndarray) -> list[list[int]]:
        grid = matrix[:, : self.bands * self.rows].reshape(len(matrix), self.bands, self.rows)
        return (grid.astype(np.uint64) * self._mult).sum(axis=2, dtype=np.uint64).tolist()

    def query(self, bands: list[int]) -> Iterable[str]:
        found: set[str] = set()
        for table, h in zip(self._tables, bands, strict=True):
            bucket = table.get(h)
            if bucket is None:
                continue
            if type(bucket) is str:
                found.add(bucket)
            else:
                found.update(bucket)
        return found

    def insert(self, key: str, bands: list[int]) -> None:
        # A bucket is its one key until a second arrives, then a list: most buckets hold one
        # key, and a str is no work for the garbage collector, whose passes over a heap full
        # of samples would otherwise cost more than the index itself.
        for table, h in zip(self._tables, bands, strict=True):
            bucket = table.get(h)
            if bucket is None:
                table[h] = key
            elif type(bucket) is str:
                table[h] = [bucket, key]
            else:
                bucket.append(key)


class _DatasketchBuckets:
    """datasketch's MinHashLSH with a storage config (Redis): shared across processes."""

    def __init__(self, hasher: MinHasher, params: tuple[int, int],
                 storage_config: Mapping[str, Any]) -> None:
        self._hasher = hasher
        self._lsh = MinHashLSH(num_perm=hasher.num_perm, params=params,
                               storage_config=dict(storage_config))

    def bands_of(self, matrix: np.ndarray) -> list[LeanMinHash]:
        return [self._hasher.lean(values) for values in matrix]

    def query(self, bands: LeanMinHash) -> Iterable[str]:
        return self._lsh.query(bands)

    def insert(self, key: str, bands: LeanMinHash) -> None:
        self._lsh.insert(key, bands, check_duplication=False)


# --------------------------------------------------------------------------- the index


class NearDupIndex:
    """An incremental near-dup index: ask whether a text is a near duplicate of anything added.

    ``verify="exact"`` keeps each added text's shingle hashes and compares exactly;
    ``"estimate"`` keeps only signature values and uses their Jaccard estimate (less memory,
    with MinHash's estimation error around the threshold). ``storage_config`` as datasketch's
    (``{"type": "redis", "redis": {"host": ..., "port": ...}, "basename": b"..."}``) keeps the
    whole index in Redis.
    """

    def __init__(
        self,
        threshold: float = 0.7,
        *,
        num_perm: int = 128,
        ngram: int = 3,
        word_ngram: int | None = None,
        seed: int = 1,
        min_recall: float = 0.99,
        verify: Literal["exact", "estimate"] = "exact",
        canonical: Callable[[str], str] = canonical_text,
        storage_config: Mapping[str, Any] | None = None,
    ) -> None:
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold
        self.verify = verify
        self.hasher = MinHasher(
            num_perm=num_perm, ngram=ngram, word_ngram=word_ngram, seed=seed, canonical=canonical
        )
        self.params = choose_lsh_params(threshold, num_perm, min_recall)
        if storage_config is not None and storage_config.get("type") == "redis":
            settings = {"num_perm": num_perm, "ngram": ngram, "word_ngram": word_ngram,
                        "seed": seed, "params": list(self.params), "verify": verify,
                        "shingles": SHINGLE_SCHEME}
            self._payloads: _Payloads = _redis_payloads(storage_config, settings)
        else:
            self._payloads = _MemoryPayloads()
        self._buckets: _Buckets = (
            _MemoryBuckets(*self.params) if storage_config is None
            else _DatasketchBuckets(self.hasher, self.params, storage_config))

    def __len__(self) -> int:
        return len(self._payloads)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._payloads

    def _matches(self, hashes: np.ndarray, values: np.ndarray, bands: Any) -> list[Match]:
        candidates = self._buckets.query(bands)
        if not candidates:
            return []
        found = []
        for key, (order, stored) in self._payloads.get_many(list(candidates)).items():
            if self.verify == "exact":
                sim = hash_jaccard(hashes, stored)
            else:
                sim = float(np.count_nonzero(values == stored)) / len(stored)
            if sim >= self.threshold:
                found.append((sim, order, key))
        # Most similar first; among equals the earliest added, so answers are deterministic.
        found.sort(key=lambda f: (-f[0], f[1]))
        return [Match(key, sim) for sim, _, key in found]

    def _prepare(self, text: str) -> tuple[np.ndarray, np.ndarray, Any]:
        hashes = self.hasher.shingle_hashes(text)
        matrix = self.hasher.signature_matrix([hashes])
        return hashes, matrix[0], self._buckets.bands_of(matrix)[0]

    def _insert(self, key: str, hashes: np.ndarray, values: np.ndarray, bands: Any) -> None:
        # Payload first: a writer killed in between leaves a key LSH never proposes, not a
        # proposed key without a payload.
        self._payloads.put(key, hashes if self.verify == "exact" else values)
        self._buckets.insert(key, bands)

    def query(self, text: str) -> list[Match]:
        """Added items whose similarity to ``text`` reaches the threshold, most similar first."""
        return self._matches(*self._prepare(text))

    def add(self, key: str, text: str) -> None:
        if key in self:
            raise KeyError(f"key {key!r} is already in the index")
        self._insert(key, *self._prepare(text))

    def add_if_new(self, key: str, text: str) -> Match | None:
        """Add ``text`` unless it is a near duplicate; then return its best match instead."""
        if key in self:
            raise KeyError(f"key {key!r} is already in the index")
        prepared = self._prepare(text)
        matches = self._matches(*prepared)
        if matches:
            return matches[0]
        self._insert(key, *prepared)
        return None

    def check(self, key: str, text: str) -> tuple[Verdict, Match | None]:
        """Keep-or-reason form of :meth:`add_if_new` (a kept text is added)."""
        match = self.add_if_new(key, text)
        return (KEEP, None) if match is None else (drop("near_duplicate"), match)

    def sign(
        self, items: Iterable[tuple[str, str]], *, batch_size: int = 2048,
        map_batches: ChunkMap = map,
    ) -> Iterator[Signed]:
        """Shingle hashes and signature values of ``(key, text)`` items, a batch at a time
        (:meth:`MinHasher.sign_batch`), by ``map_batches`` (in process, on local processes or on
        Dask: ``tasks.orchestration.chunk_map.chunk_map``), batches in input order."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        stream = iter(items)
        batches = iter(lambda: list(islice(stream, batch_size)), [])
        yield from map_batches(self.hasher.sign_batch, batches)

    def deduplicate_signed(
        self, items: Iterable[tuple[str, np.ndarray, np.ndarray]], *, batch_size: int = 2048,
    ) -> Iterator[tuple[str, Match | None]]:
        """:meth:`deduplicate` of items already signed (``(key, shingle hashes, signature
        values)``, as :meth:`sign` gives them), fed in the order given."""
        stream = iter(items)
        while batch := list(islice(stream, batch_size)):
            all_bands = self._buckets.bands_of(np.stack([values for _, _, values in batch]))
            for (key, hashes, values), bands in zip(batch, all_bands, strict=True):
                if key in self:
                    yield key, None
                    continue
                matches = self._matches(hashes, values, bands)
                if matches:
                    yield key, matches[0]
                else:
                    self._insert(key, hashes, values, bands)
                    yield key, None

    def deduplicate(
        self, items: Iterable[tuple[str, str]], *, batch_size: int = 2048,
        map_batches: ChunkMap = map,
    ) -> Iterator[tuple[str, Match | None]]:
        """Streaming :meth:`add_if_new` over ``(key, text)`` items, in order: yields each key with
        None (kept, now indexed) or its best match among the texts kept before it.

        Signatures are computed a batch at a time by ``map_batches`` (:meth:`sign`); the index
        is fed in input order, so the outcome does not depend on where they were computed. Only
        kept texts stay in the index. A key already indexed (by an earlier run sharing a Redis
        index) counts as kept.
        """
        signed = (item for batch in self.sign(items, batch_size=batch_size,
                                              map_batches=map_batches) for item in batch)
        yield from self.deduplicate_signed(signed, batch_size=batch_size)
