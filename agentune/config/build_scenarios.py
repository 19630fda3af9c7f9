"""Stage 1b, build_scenarios: seed and teacher-written scenarios, their ground truth executed."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, field_validator

from agentune.config.inputs import ARTIFACT, FILE
from agentune.config.strict import UTC_OFFSET_PATTERN, Strict

# What the build_scenarios stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("scenarios", "environments", "llm.teacher", "llm.judge")


class ScenarioGenerationConfig(Strict):
    """Scenarios generated from the environments' task recipes (the catalog's `recipes:`) in
    sampled worlds, split by construction: held-out scenarios come from world seeds and phrasing
    families train never used, and the written scenarios of the training environments become
    the `natural` split (evaluated, never trained on). README "Scenarios at scale"."""

    enabled: bool = Field(False, description="Generate scenarios from the recipes (off: the "
                          "seed file and the teacher only, split as before).")
    train: int = Field(2000, ge=0, le=1_000_000,
                       description="Train scenarios asked, over the training environments.")
    heldout: int = Field(300, ge=0, le=1_000_000,
                         description="Held-out scenarios asked, over the training environments "
                         "(unseen world seeds and unseen phrasing families).")
    reserved: int = Field(100, ge=0, le=1_000_000,
                          description="Scenarios asked in the reserved environments.")
    heldout_families: int = Field(1, ge=1, le=16,
                                  description="Phrasing families of each recipe and language "
                                  "kept out of train (a recipe keeps at least one for train).")
    dev: int = Field(0, ge=0, le=1_000_000,
                     description="Dev scenarios asked, over the training environments: unseen "
                     "world seeds and phrasing families neither train nor heldout uses, to choose "
                     "a recipe on without looking at heldout (0: no dev split).")
    dev_families: int = Field(1, ge=1, le=16,
                              description="Phrasing families of each recipe and language that "
                              "only dev uses, taken from train's share (with `dev` > 0; a recipe "
                              "keeps at least one for train).")
    max_worlds: int = Field(500, ge=1, le=1_000_000,
                            description="Most worlds drawn per environment and split; fewer "
                            "scenarios than asked are reported, with the reasons.")
    paraphrase: bool = Field(False, description="The teacher rewrites each generated request; "
                             "kept only when every ground-truth argument value is still in it, "
                             "else the rendered request stays (reject `paraphrase_lost_value`).")
    paraphrase_max_tokens: int = Field(128, ge=16, le=4096,
                                       description="Completion budget of one paraphrase.")


class BuildScenariosConfig(Strict):
    """build_scenarios: scenarios (a request in an environment, its starting state, the
    ground-truth calls, the facts an answer must state) from a seed file and from the teacher;
    every ground truth is run in a fresh environment and the failures are rejected."""

    queries: Annotated[str, ARTIFACT] = Field("queries", min_length=1,
                         description="Input artifact (name or name@version): the query sets the "
                         "teacher writes scenarios for.")
    seed_file: Annotated[str | None, FILE] = Field(
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

    generate: ScenarioGenerationConfig = Field(
        default_factory=ScenarioGenerationConfig,
        description="Scenarios generated from the environments' task recipes (off by default).")

    @field_validator("current_time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2025-06-02T09:30:00+08:00")
        return value
