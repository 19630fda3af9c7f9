"""What the LLM calls of a run cost, counted per (stage, role)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.types import Usage


@dataclass
class UsageCounts:
    """Counters of one (stage, role) pair, or of the whole run.

    ``requests`` counts every ``chat`` call; ``cached`` of them were answered from the response
    cache (no tokens, no cost) and ``failures`` failed for good. ``retries`` counts repeated
    attempts. Tokens and cost are those of paid (uncached) answers.
    """

    requests: int = 0
    cached: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: UsageCounts) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def cost_of(usage: Usage, role: RoleConfig) -> float:
    """Money for one answer at the role's prices per million tokens; an unset price costs 0."""
    return (
        usage.prompt_tokens * (role.price_input_per_1m or 0.0)
        + usage.completion_tokens * (role.price_output_per_1m or 0.0)
    ) / 1_000_000


class UsageLedger:
    """Running counters keyed by (stage, role); the gateway writes, summaries read."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], UsageCounts] = {}

    def _at(self, stage: str, role: str) -> UsageCounts:
        return self._counts.setdefault((stage, role), UsageCounts())

    def record_answer(self, stage: str, role: str, usage: Usage, cost: float) -> None:
        counts = self._at(stage, role)
        counts.requests += 1
        counts.prompt_tokens += usage.prompt_tokens
        counts.completion_tokens += usage.completion_tokens
        counts.cost += cost

    def record_cached(self, stage: str, role: str) -> None:
        counts = self._at(stage, role)
        counts.requests += 1
        counts.cached += 1

    def record_retry(self, stage: str, role: str) -> None:
        self._at(stage, role).retries += 1

    def record_failure(self, stage: str, role: str) -> None:
        counts = self._at(stage, role)
        counts.requests += 1
        counts.failures += 1

    def total(self) -> UsageCounts:
        total = UsageCounts()
        for counts in self._counts.values():
            total.add(counts)
        return total

    def rows(self) -> list[dict[str, object]]:
        """One dict per (stage, role), sorted, ready for a table artifact or a DataFrame."""
        return [
            {"stage": stage, "role": role, **asdict(counts)}
            for (stage, role), counts in sorted(self._counts.items())
        ]
