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
import re
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from agentune.tasks.common.rejects import KEEP, Verdict, drop

if TYPE_CHECKING:
    from agentune.tasks.orchestration.chunk_map import ChunkMap

Signed = list[tuple[str, np.ndarray, LeanMinHash]]
"""``(key, shingle hashes, signature)`` of every item of a batch."""


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

# Scripts written without spaces between words: each character is a token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002ffff"
_MIXED_TOKEN = re.compile(f"([{_CJK}])|([^\\W_{_CJK}]+)")
_MULT = np.uint64(0x9E3779B97F4A7C15)
# Different start values keep word grams, character grams and mixed-mode character grams apart.
_SALT_CHARS = np.uint64(0x243F6A88)
_SALT_WORDS = np.uint64(0x85A308D3)
_SALT_CJK = np.uint64(0x13198A2E)
_EMPTY = np.zeros(0, dtype=np.uint32)


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


def _to_hash32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, folded to 32 bits: sorted, unique uint32 shingle hashes."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    h = h ^ (h >> np.uint64(33))
    return np.unique((h ^ (h >> np.uint64(32))).astype(np.uint32))


def char_ngram_hashes(text: str, ngram: int) -> np.ndarray:
    """Hashes of the character n-grams of ``text`` as given (callers canonicalise first)."""
    if not text:
        return _EMPTY
    ids = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    return _to_hash32(_gram_hashes(ids, ngram, _SALT_CHARS))


def mixed_ngram_hashes(text: str, word_ngram: int, char_ngram: int) -> np.ndarray:
    """Hashes of word n-grams over the Latin-script words (letters and digits) of ``text`` and of
    character n-grams over its CJK characters; NFKC and case folding first, punctuation ignored."""
    words: list[int] = []
    chars: list[int] = []
    for cjk, word in _MIXED_TOKEN.findall(unicodedata.normalize("NFKC", text).casefold()):
        if cjk:
            chars.append(ord(cjk))
        else:
            words.append(zlib.crc32(word.encode("utf-8")))
    if not words and not chars:
        return _EMPTY
    grams = np.concatenate([
        _gram_hashes(np.array(words, dtype=np.uint64), word_ngram, _SALT_WORDS),
        _gram_hashes(np.array(chars, dtype=np.uint64), char_ngram, _SALT_CJK),
    ])
    return _to_hash32(grams)


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

    def shingle_hashes(self, text: str) -> np.ndarray:
        if self.word_ngram is None:
            return char_ngram_hashes(self.canonical(text), self.ngram)
        return mixed_ngram_hashes(text, self.word_ngram, self.ngram)

    def minhashes(self, hash_sets: Iterable[np.ndarray]) -> list[MinHash]:
        """Signatures of already hashed shingle sets, in bulk (one set of permutations reused)."""
        return MinHash.bulk(hash_sets, num_perm=self.num_perm, seed=self.seed, hashfunc=int)

    def signature(self, text: str) -> LeanMinHash:
        return self.signatures([text])[0]

    def signatures(self, texts: Iterable[str]) -> list[LeanMinHash]:
        return [LeanMinHash(m) for m in self.minhashes(self.shingle_hashes(t) for t in texts)]

    def sign_batch(self, batch: Sequence[tuple[str, str]]) -> Signed:
        """Shingle hashes and signature of every ``(key, text)``: the CPU-heavy part of dedup,
        pure, so it can run anywhere (a Dask worker) given this hasher."""
        hash_sets = [self.shingle_hashes(text) for _, text in batch]
        return [(key, hashes, LeanMinHash(sig)) for (key, _), hashes, sig
                in zip(batch, hash_sets, self.minhashes(hash_sets), strict=True)]


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
                        "seed": seed, "params": list(self.params), "verify": verify}
            self._payloads: _Payloads = _redis_payloads(storage_config, settings)
        else:
            self._payloads = _MemoryPayloads()
        self._lsh = MinHashLSH(
            num_perm=num_perm, params=self.params,
            storage_config=dict(storage_config) if storage_config else None,
        )

    def __len__(self) -> int:
        return len(self._payloads)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._payloads

    def _matches(self, hashes: np.ndarray, sig: MinHash) -> list[Match]:
        found = []
        for key, (order, stored) in self._payloads.get_many(self._lsh.query(sig)).items():
            if self.verify == "exact":
                sim = hash_jaccard(hashes, stored)
            else:
                sim = float(np.count_nonzero(sig.hashvalues == stored)) / len(stored)
            if sim >= self.threshold:
                found.append((sim, order, key))
        # Most similar first; among equals the earliest added, so answers are deterministic.
        found.sort(key=lambda f: (-f[0], f[1]))
        return [Match(key, sim) for sim, _, key in found]

    def _prepare(self, text: str) -> tuple[np.ndarray, MinHash]:
        hashes = self.hasher.shingle_hashes(text)
        return hashes, self.hasher.minhashes([hashes])[0]

    def _insert(self, key: str, hashes: np.ndarray, sig: MinHash) -> None:
        # Payload first: a writer killed in between leaves a key LSH never proposes, not a
        # proposed key without a payload.
        self._payloads.put(key, hashes if self.verify == "exact" else sig.hashvalues)
        self._lsh.insert(key, sig, check_duplication=False)

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
        hashes, sig = self._prepare(text)
        matches = self._matches(hashes, sig)
        if matches:
            return matches[0]
        self._insert(key, hashes, sig)
        return None

    def check(self, key: str, text: str) -> tuple[Verdict, Match | None]:
        """Keep-or-reason form of :meth:`add_if_new` (a kept text is added)."""
        match = self.add_if_new(key, text)
        return (KEEP, None) if match is None else (drop("near_duplicate"), match)

    def deduplicate(
        self, items: Iterable[tuple[str, str]], *, batch_size: int = 2048,
        map_batches: ChunkMap = map,
    ) -> Iterator[tuple[str, Match | None]]:
        """Streaming :meth:`add_if_new` over ``(key, text)`` items, in order: yields each key with
        None (kept, now indexed) or its best match among the texts kept before it.

        Signatures are computed a batch at a time with ``MinHash.bulk``, by ``map_batches``
        (in process, or on Dask: ``tasks.orchestration.chunk_map.chunk_map``); the index is fed in input
        order, so the outcome does not depend on where they were computed. Only kept texts stay
        in the index. A key already indexed (by an earlier run sharing a Redis index) counts as
        kept.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        stream = iter(items)
        batches = iter(lambda: list(islice(stream, batch_size)), [])
        for signed in map_batches(self.hasher.sign_batch, batches):
            for key, hashes, sig in signed:
                if key in self:
                    yield key, None
                    continue
                matches = self._matches(hashes, sig)
                if matches:
                    yield key, matches[0]
                else:
                    self._insert(key, hashes, sig)
                    yield key, None
