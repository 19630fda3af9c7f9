"""`attempts` (and the student's own rollouts on training scenarios) -> `preferences`: pairs that
share the conversation up to one decision and differ there, ranked by the reward registry."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.build_preferences import STAGE
from agentune.tasks.build_preferences.pairs import Candidate, PairBuild
from agentune.tasks.build_preferences.stage import (
    ARTIFACT,
    PreferenceInputs,
    dataset_rows,
    pair,
    plot_margins,
    preference_params,
    read_records,
    resolve_inputs,
    stored_attempt_candidates,
    student_candidates,
    student_role,
    summary_rows,
)
from agentune.tasks.common.schemas import PREFERENCE_FEATURES
from agentune.tasks.environments.catalog import EnvironmentCatalog, configured_environments
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.orchestration.stage_outputs import reused_result, stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.verifier.rewards import RewardModel


@task(name="score synthesis attempts", cache_policy=NO_CACHE)
def score_attempts(store: ArtifactStore, inputs: PreferenceInputs, reward: RewardModel,
                   records: Mapping[str, ScenarioRecord]) -> list[Candidate]:
    return stored_attempt_candidates(store, inputs, reward, records)


@task(name="roll the student out", cache_policy=NO_CACHE)
async def roll_out_student(config: RunConfig, inputs: PreferenceInputs,
                           records: Mapping[str, ScenarioRecord], catalog: EnvironmentCatalog,
                           reward: RewardModel) -> tuple[list[Candidate], dict[str, Any]]:
    logger = get_run_logger()
    assert inputs.student is not None
    started = time.perf_counter()
    tenths = [0]

    async def progress(done: int, total: int) -> None:
        if done == 0:
            logger.info("student %s: %d rollouts", inputs.student.name, total)
        elif done * 10 // total > tenths[0]:
            tenths[0] = done * 10 // total
            logger.info("student rollouts %d/%d (%.2f/s)", done, total,
                        done / max(time.perf_counter() - started, 1e-9))

    role = student_role(config, inputs.student)
    return await student_candidates(config, list(records.values()), catalog, reward, role=role,
                                    on_progress=progress)


@task(name="pair and publish preferences", cache_policy=NO_CACHE)
def publish(store: ArtifactStore, inputs: PreferenceInputs, params: dict[str, Any],
            built: PairBuild, student: dict[str, Any] | None, reward: RewardModel) -> Any:
    stats = built.stats() | {"student": student, "reward": reward.lineage(),
                             "notes": inputs.notes}
    stats["summary"] = summary_rows(stats, student)
    version = store.version_id(ARTIFACT, parents=inputs.parents, params=params)
    with tempfile.TemporaryDirectory(prefix="agentune-prefs-") as tmp:
        png = plot_margins([r["margin"] for r in built.rows], Path(tmp) / "margins.png",
                           title=f"{ARTIFACT}@{version}: {len(built.rows)} pairs")
        return store.publish(
            ARTIFACT, built.rows, parents=inputs.parents, params=params, stats=stats,
            features=PREFERENCE_FEATURES, files={"margins.png": png},
            description="preference pairs: prompt (messages + tools) up to one decision, the "
            "chosen and rejected decision, both trajectories' rewards and components")


@flow(name="build_preferences", description="Synthesis attempts and the student's own "
      "rollouts in; preference pairs (one decision apart, ranked by the reward registry) out.")
async def build_preferences(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        inputs = resolve_inputs(config, store)
        reward = RewardModel.from_config(config.reward)
        catalog = None
        if inputs.student is not None:
            catalog = configured_environments(config.environments)
        params = preference_params(config, inputs, reward, catalog)
        reused = reused_result(STAGE, store, [ARTIFACT], parents=inputs.parents, params=params)
        if reused is not None:
            return reused
        # Both sources score against the same scenarios: read them once.
        records = await asyncio.to_thread(read_records, store, inputs.scenarios)
        candidates = score_attempts(store, inputs, reward, records)
        student = None
        if inputs.student is not None and catalog is not None:
            rolled, student = await roll_out_student(config, inputs, records, catalog, reward)
            candidates = candidates + rolled
        built = pair(config, candidates, await asyncio.to_thread(dataset_rows, store, inputs))
        for note in inputs.notes:
            get_run_logger().warning(note)
        manifest = publish(store, inputs, params, built, student, reward)
        return stage_result(STAGE, {ARTIFACT: manifest}, reused=False,
                            summary=manifest.stats["summary"], usage=[], store=store)
