"""Keep-or-reason verdicts and the reject rows every stage writes for what it drops.

A filter answers ``KEEP`` or ``(False, reason)``; whoever applies it turns a drop into a
:class:`Reject` so nothing leaves a stage without a row saying which stage, why and which item.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

from datasets import Features, Value

# The columns of every `rejects` table (a row per dropped item, see Reject).
REJECT_FEATURES = Features(
    {
        "stage": Value("string"),
        "reason": Value("string"),
        "item_id": Value("string"),
        "detail": Value("string"),
    }
)

Verdict = Literal[True] | tuple[Literal[False], str]
KEEP: Verdict = True


@dataclass(frozen=True)
class Reject:
    """One dropped item: the stage that dropped it, a short machine reason, and a human detail."""

    stage: str
    reason: str
    item_id: str
    detail: str = ""

    def to_row(self) -> dict[str, str]:
        return asdict(self)


def drop(reason: str) -> Verdict:
    """The verdict of a filter that drops an item."""
    return (False, reason)


def reason_counts(rejects: Iterable[Reject]) -> dict[str, int]:
    """How many items were dropped for each reason, most frequent first (ties by name)."""
    counts = Counter(r.reason for r in rejects)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
