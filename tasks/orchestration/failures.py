"""What a failed pipeline run says: the stage that failed and the inputs it was reading.

The message becomes the flow run's state message in the Prefect UI. A re-run of the same config
resumes: every stage before the failing one finds its published versions and returns at once.
"""

from __future__ import annotations

from typing import Any

from agentune.config import RunConfig

# Stage -> the config fields naming what it reads (files, or store specs like "queries@latest").
STAGE_INPUTS: dict[str, tuple[str, ...]] = {
    "collect_queries": ("queries.seed_queries", "environments.catalog"),
    "build_scenarios": ("scenarios.queries", "scenarios.seed_file", "environments.catalog"),
    "build_templates": ("templates.queries", "templates.tools"),
    "synthesize": ("synthesis.queries", "synthesis.catalog", "synthesis.templates"),
    "build_dataset": ("dataset.trajectories", "dataset.general_data"),
    "train": ("train.dataset",),
    "build_preferences": ("preferences.attempts", "preferences.student.model"),
    "train_dpo": ("train.preferences", "train.from_model"),
    "train_grpo": ("train.grpo.scenarios", "train.from_model"),
    "evaluate": ("evaluate.dataset", "evaluate.templates"),
}


class StageFailed(RuntimeError):
    """A pipeline stage raised; the message names the stage, its inputs and what was done."""


def config_value(config: RunConfig, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def stage_failure(config: RunConfig, stage: str, done: dict[str, Any],
                  error: BaseException) -> StageFailed:
    inputs = ", ".join(f"{f}={config_value(config, f)!r}" for f in STAGE_INPUTS.get(stage, ()))
    finished = ", ".join(f"{name} -> {sorted(r['outputs'].values())}" for name, r in done.items())
    return StageFailed(
        f"stage {stage!r} failed (inputs: {inputs or 'see the config'}): "
        f"{type(error).__name__}: {error}. Completed before it: {finished or 'none'}. "
        "Re-run the same config to resume: finished stages reuse their published versions."
    )
