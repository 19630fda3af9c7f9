"""Train / val / test splits by group (the query set for agent rows), without leakage.

Each group draws a number in [0, 1) from a hash of the seed and its id, and lands in test below
``test_fraction``, in val below ``test_fraction + val_fraction``, else in train. A group's split
therefore depends only on its own id and the seed: it never changes when other groups are added
to a later version, so a query set tested on once is never trained on later. All rows of a
group share its split, so no set spans two splits.

Small inputs: when a split with a positive fraction draws no group at all, the group whose number
lies nearest that split's interval moves there, taken from a split that keeps at least one group,
so a demo-sized dataset (three or more groups) still has something to validate and test on.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

SPLIT_ORDER = ("test", "val", "train")


def group_draw(group: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_splits(
    groups: Iterable[str], *, val_fraction: float, test_fraction: float, seed: int
) -> dict[str, str]:
    """Group id -> ``train``, ``val`` or ``test``."""
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise ValueError("fractions must be >= 0 and leave room for train")
    bounds = {"test": (0.0, test_fraction),
              "val": (test_fraction, test_fraction + val_fraction)}
    draws = {g: group_draw(g, seed) for g in sorted(set(groups))}
    split = {}
    for group, u in draws.items():
        split[group] = ("test" if u < bounds["test"][1]
                        else "val" if u < bounds["val"][1] else "train")
    for name, (low, high) in bounds.items():
        if high <= low or name in split.values():
            continue
        sizes = Counter(split.values())
        movable = [g for g in draws if sizes[split[g]] > 1]
        if not movable:
            continue

        def distance(g: str, low: float = low, high: float = high) -> tuple[float, str]:
            return (max(low - draws[g], draws[g] - high, 0.0), g)

        split[min(movable, key=distance)] = name
    return split
