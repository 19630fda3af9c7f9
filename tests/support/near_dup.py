"""Near-duplicate clusters from ``NearDupIndex.deduplicate``, for tests that check grouping."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentune.tasks.common.near_dedup import NearDupIndex


def near_dup_clusters(items: Iterable[tuple[str, str]], threshold: float,
                      **index_options: Any) -> dict[str, dict[str, float]]:
    """``{representative: {member: similarity}}`` in input order; the representative (the first
    of its group) is a member of itself with similarity 1.0."""
    batch_size = index_options.pop("batch_size", 2048)
    clusters: dict[str, dict[str, float]] = {}
    for key, match in NearDupIndex(threshold, **index_options).deduplicate(
            items, batch_size=batch_size):
        if match is None:
            clusters[key] = {key: 1.0}
        else:
            clusters[match.key][key] = match.similarity
    return clusters
