"""recall@k and reciprocal rank of one ranked list against the tools a request needs."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the needed tools found in the first ``k``."""
    if not relevant:
        raise ValueError("recall needs at least one relevant tool")
    return len(set(ranked[:k]) & set(relevant)) / len(set(relevant))


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str]) -> float:
    """1 / the rank of the first needed tool; 0 when none was retrieved (a miss)."""
    for i, name in enumerate(ranked, 1):
        if name in relevant:
            return 1.0 / i
    return 0.0
