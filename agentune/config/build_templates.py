"""Stage 2, build_templates: Meta-Agent templates written, filtered and judged."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, model_validator

from agentune.config.inputs import ARTIFACT
from agentune.config.strict import UTC_OFFSET_PATTERN, Strict

# What the build_templates stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("templates", "llm.teacher", "llm.judge")

AgentProtocolName = Literal["react", "autogpt", "toolllama", "modelscope", "kuaiagent"]


class BuildTemplatesConfig(Strict):
    """build_templates: the Meta-Agent writes candidate agent prompt templates from query sets;
    a structural filter and judged prompt pairs (benchmark vs candidate) decide which are kept."""

    queries: Annotated[str, ARTIFACT] = Field(
        "queries", min_length=1,
        description="Input query sets: `queries` (latest) or `queries@VERSION`.",
    )
    tools: Annotated[str, ARTIFACT] = Field(
        "tools", min_length=1,
        description="Input tool catalog: `tools` (latest) or `tools@VERSION`.",
    )
    unseen_templates: int = Field(
        2, ge=0, le=1000, description="Kept Meta-Agent templates set aside for evaluation "
        "(`reserved`): never used in training, every held-out prompt of evaluate is also "
        "rendered with them.",
    )
    max_sets: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Query sets that seed the Meta-Agent, drawn with the run seed, languages "
        "alternating (null: every set).",
    )
    candidates_per_set: int = Field(
        2, ge=1, le=100, description="Candidate templates the Meta-Agent writes per query set."
    )
    protocols: list[AgentProtocolName] = Field(
        default_factory=lambda: ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"],
        min_length=1,
        description="Output formats a candidate's Format section may use (rotated over "
        "candidates).",
    )
    template_languages: list[Literal["zh", "en"]] = Field(
        default_factory=lambda: ["zh", "en"],
        min_length=1,
        description="Languages candidates are written in: a set's first candidate takes the set's "
        "language when listed, later ones rotate through the list.",
    )
    section_max_chars: int = Field(
        500, ge=40, le=8000,
        description="Longest Profile/Tools/Goal/Memory/Format text the Meta-Agent may write, in "
        "characters (Instruction may use twice this).",
    )
    meta_temperature: float = Field(
        1.0, ge=0, le=2, description="Teacher sampling temperature for the Meta-Agent."
    )
    near_dup_threshold: float = Field(
        0.7, gt=0, le=1,
        description="Character 5-gram Jaccard similarity of the written sections at or above which "
        "a candidate is a near duplicate of a template kept before it (benchmarks included).",
    )
    benchmark_templates: list[AgentProtocolName] = Field(
        default_factory=lambda: ["autogpt", "toolllama"],
        min_length=1,
        description="Proven templates each candidate is compared with (one prompt pair per "
        "benchmark template and judged query).",
    )
    queries_per_candidate: int = Field(
        3, ge=1, le=100,
        description="N: queries of the candidate's set judged per benchmark template.",
    )
    epsilon: float = Field(
        0.0, ge=-9, le=9,
        description="An instance is kept when score_candidate - score_benchmark > epsilon "
        "(scores 1-10, each the mean of both judging orders).",
    )
    threshold: float = Field(
        6.0, ge=1, le=10,
        description="A template is kept when the mean of its candidate scores >= threshold and at "
        "least one of its instances was kept.",
    )
    answer_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest teacher answer to a rendered agent prompt."
    )
    answer_temperature: float = Field(
        0.0, ge=0, le=2, description="Teacher temperature when answering the prompt pairs."
    )
    rationale_max_chars: int = Field(
        400, ge=20, le=4000, description="Longest rationale the judge may write per answer."
    )
    current_time: AwareDatetime = Field(
        datetime.fromisoformat("2025-06-02T09:30:00+08:00"),
        description="The `current time` shown in judged prompts, with its UTC offset (e.g. "
        "2025-06-02T09:30:00+08:00; prompts show the wall-clock time); fixed so that a re-run "
        "sends the same requests (and hits the response cache).",
        json_schema_extra=UTC_OFFSET_PATTERN,
    )

    @model_validator(mode="after")
    def _distinct_lists(self) -> "BuildTemplatesConfig":
        for name in ("protocols", "template_languages", "benchmark_templates"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists an entry twice: {values}")
        return self
