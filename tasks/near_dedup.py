"""Near-duplicate detection with MinHash LSH (datasketch 2.x) over character n-grams.

Generic over what the texts are (queries now, trajectories later): texts in, clusters with a
representative out. Character n-grams need no word segmentation, so Chinese works as well as
English. LSH only proposes candidates; every candidate is confirmed by its Jaccard similarity,
exact (on stored shingle sets) or estimated from the signatures for long texts.

datasketch's own band/row choice finds a pair at exactly the threshold only ~40% of the time, so
:func:`choose_lsh_params` picks bands and rows for a target recall at the threshold instead;
the extra candidates that costs are removed by the verification step.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from datasketch import LeanMinHash, MinHash, MinHashLSH

from agentune.tasks.rejects import KEEP, Verdict, drop


def canonical_text(text: str) -> str:
    """What shingles are cut from: NFKC, case-folded, without whitespace and punctuation."""
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


@dataclass
class NearDupCluster:
    """A representative and the items that are near duplicates of it (input order)."""

    representative: str
    members: list[str] = field(default_factory=list)
    """Every member key, the representative first."""
    similarity: dict[str, float] = field(default_factory=dict)
    """Member key -> its Jaccard similarity to the representative (1.0 for itself)."""


class MinHasher:
    """Shingles and MinHash signatures with one fixed set of permutations."""

    def __init__(
        self,
        *,
        num_perm: int = 128,
        ngram: int = 3,
        seed: int = 1,
        canonical: Callable[[str], str] = canonical_text,
    ) -> None:
        if ngram < 1:
            raise ValueError("ngram must be >= 1")
        self.num_perm = num_perm
        self.ngram = ngram
        self.seed = seed
        self.canonical = canonical
        # One prototype; copies share its permutations instead of regenerating them.
        self._proto = MinHash(num_perm=num_perm, seed=seed)

    def shingles(self, text: str) -> frozenset[str]:
        return shingles(self.canonical(text), self.ngram)

    def signature_of_shingles(self, grams: Iterable[str]) -> LeanMinHash:
        mh = self._proto.copy()
        mh.update_batch([g.encode("utf-8") for g in grams])
        return LeanMinHash(mh)

    def signature(self, text: str) -> LeanMinHash:
        return self.signature_of_shingles(self.shingles(text))

    def signatures(self, texts: Iterable[str]) -> list[LeanMinHash]:
        return [self.signature(t) for t in texts]


class NearDupIndex:
    """An incremental near-dup index: ask whether a text is a near duplicate of anything added.

    ``verify="exact"`` keeps each added text's shingle set and compares exactly (short texts such
    as queries); ``"estimate"`` keeps only signatures and uses their Jaccard estimate (long texts
    such as trajectories, where shingle sets would cost too much memory).
    """

    def __init__(
        self,
        threshold: float = 0.7,
        *,
        num_perm: int = 128,
        ngram: int = 3,
        seed: int = 1,
        min_recall: float = 0.99,
        verify: Literal["exact", "estimate"] = "exact",
        canonical: Callable[[str], str] = canonical_text,
    ) -> None:
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold
        self.verify = verify
        self.hasher = MinHasher(num_perm=num_perm, ngram=ngram, seed=seed, canonical=canonical)
        self.params = choose_lsh_params(threshold, num_perm, min_recall)
        self._lsh = MinHashLSH(num_perm=num_perm, params=self.params)
        self._order: dict[str, int] = {}
        self._shingles: dict[str, frozenset[str]] = {}
        self._signatures: dict[str, LeanMinHash] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def _matches(self, grams: frozenset[str], sig: LeanMinHash) -> list[Match]:
        found = []
        for key in self._lsh.query(sig):
            if self.verify == "exact":
                sim = jaccard(grams, self._shingles[key])
            else:
                sim = sig.jaccard(self._signatures[key])
            if sim >= self.threshold:
                found.append(Match(key, sim))
        # Most similar first; among equals the earliest added, so answers are deterministic.
        found.sort(key=lambda m: (-m.similarity, self._order[m.key]))
        return found

    def query(self, text: str) -> list[Match]:
        """Added items whose similarity to ``text`` reaches the threshold, most similar first."""
        grams = self.hasher.shingles(text)
        return self._matches(grams, self.hasher.signature_of_shingles(grams))

    def add(self, key: str, text: str) -> None:
        if key in self._order:
            raise KeyError(f"key {key!r} is already in the index")
        grams = self.hasher.shingles(text)
        self._insert(key, grams, self.hasher.signature_of_shingles(grams))

    def _insert(self, key: str, grams: frozenset[str], sig: LeanMinHash) -> None:
        self._order[key] = len(self._order)
        self._lsh.insert(key, sig)
        if self.verify == "exact":
            self._shingles[key] = grams
        else:
            self._signatures[key] = sig

    def add_if_new(self, key: str, text: str) -> Match | None:
        """Add ``text`` unless it is a near duplicate; then return its best match instead."""
        if key in self._order:
            raise KeyError(f"key {key!r} is already in the index")
        grams = self.hasher.shingles(text)
        sig = self.hasher.signature_of_shingles(grams)
        matches = self._matches(grams, sig)
        if matches:
            return matches[0]
        self._insert(key, grams, sig)
        return None

    def check(self, key: str, text: str) -> tuple[Verdict, Match | None]:
        """Keep-or-reason form of :meth:`add_if_new` (a kept text is added)."""
        match = self.add_if_new(key, text)
        return (KEEP, None) if match is None else (drop("near_duplicate"), match)


def cluster_near_duplicates(
    items: Sequence[tuple[str, str]],
    threshold: float = 0.7,
    **index_options: object,
) -> list[NearDupCluster]:
    """Group ``(key, text)`` items into near-duplicate clusters, greedily in input order.

    An item joins the cluster of the most similar representative already seen, else starts its
    own; so the first of a group is its representative and the result depends only on the order
    of ``items``. Clusters come in the order of their representatives.
    """
    index = NearDupIndex(threshold, **index_options)  # type: ignore[arg-type]
    clusters: dict[str, NearDupCluster] = {}
    for key, text in items:
        match = index.add_if_new(key, text)
        if match is None:
            clusters[key] = NearDupCluster(key, [key], {key: 1.0})
        else:
            cluster = clusters[match.key]
            cluster.members.append(key)
            cluster.similarity[key] = match.similarity
    return list(clusters.values())
