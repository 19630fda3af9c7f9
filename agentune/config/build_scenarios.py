"""Stage 1b, build_scenarios: seed and teacher-written scenarios, their ground truth executed."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, field_validator

from agentune.config.strict import UTC_OFFSET_PATTERN, Strict


class BuildScenariosConfig(Strict):
    """build_scenarios: scenarios (a request in an environment, its starting state, the
    ground-truth calls, the facts an answer must state) from a seed file and from the teacher;
    every ground truth is run in a fresh environment and the failures are rejected."""

    queries: str = Field("queries", min_length=1,
                         description="Input artifact (name or name@version): the query sets the "
                         "teacher writes scenarios for.")
    seed_file: str | None = Field(
        "data/demo/scenarios.yaml",
        description="Hand-written scenarios (YAML or JSON, a list under `scenarios`). Empty: "
        "only teacher-written ones.")
    teacher_sets: int = Field(
        0, ge=0, le=100_000,
        description="Query sets the teacher writes scenarios for (0: none; the teacher sees a "
        "set's queries and one training environment's tools, as the Meta-Agent sees query sets).")
    scenarios_per_set: int = Field(1, ge=1, le=100,
                                   description="Scenarios the teacher writes per query set.")
    teacher_temperature: float = Field(0.7, ge=0, le=2,
                                       description="Sampling temperature of the scenario writer.")
    min_judge_score: float | None = Field(
        None, ge=1, le=10,
        description="With a value: the judge scores each teacher-written request 1-10 as a "
        "realistic request its calls solve; below it the scenario is dropped (judged_low).")
    max_calls: int = Field(4, ge=1, le=32,
                           description="Most ground-truth calls a teacher-written scenario has.")
    text_max_chars: int = Field(160, ge=20, le=4000,
                                description="Longest request or fact the teacher writes "
                                "(characters; bounds constrained decoding).")
    max_tokens: int = Field(512, ge=32, le=32_768,
                            description="Completion budget of one scenario-writer answer.")
    current_time: datetime = Field(
        datetime.fromisoformat("2025-06-02T09:30:00+08:00"),
        description="The clock of the scenarios' episodes (what date tools and simulated APIs "
        "take as now); recorded with each scenario, so synthesis and evaluation act at it too.",
        json_schema_extra=UTC_OFFSET_PATTERN)
    heldout_fraction: float = Field(
        0.25, ge=0, le=0.9,
        description="Share of the training environments' scenario families set aside for "
        "evaluation (`split: heldout`, drawn per family with the run seed). Scenarios of a "
        "reserved environment are all `split: reserved`.")

    @field_validator("current_time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2025-06-02T09:30:00+08:00")
        return value
