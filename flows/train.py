"""Stage 5: an `sft_dataset` (sft), `preferences` (dpo) or `scenarios` (grpo) version -> TRL's
trainer as a multi-process DeepSpeed job (full parameters or LoRA) -> `model`."""

from __future__ import annotations

import time
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import reused_result, stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest
from agentune.tasks.train import STAGE
from agentune.tasks.train.cost import CostEstimate, OverBudgetError
from agentune.tasks.train.run_lock import work_dir_lock
from agentune.tasks.train.stage import (
    MODEL_ARTIFACT,
    TrainingPlan,
    estimate_cost,
    plan_training,
    publish_model,
    run_training,
)


def _describe(event: dict[str, Any]) -> str:
    parts = [f"step {event.get('step')}/{event.get('max_steps')}"]
    if event.get("loss") is not None:
        parts.append(f"loss {event['loss']:.4f}")
    if event.get("eval_loss") is not None:
        parts.append(f"eval loss {event['eval_loss']:.4f}")
    metrics = event.get("metrics") or {}
    if metrics.get("reward") is not None:
        parts.append(f"reward {metrics['reward']:.4f}")
    if metrics.get("rewards/margins") is not None:
        parts.append(f"margin {metrics['rewards/margins']:.4f}")
    if event.get("tokens_per_s") is not None:
        parts.append(f"{event['tokens_per_s']:,.0f} tokens/s")
    return " · ".join(parts)


@task(name="plan training", cache_policy=NO_CACHE)
def plan(config: RunConfig, store: ArtifactStore, method: str | None,
         from_model: str | None) -> TrainingPlan:
    return plan_training(config, store, method=method, from_model=from_model)


@task(name="estimate training cost", cache_policy=NO_CACHE)
def estimate(training: TrainingPlan, config: RunConfig) -> CostEstimate:
    cost = estimate_cost(training, config.train.cost)
    get_run_logger().info(cost.summary())
    if cost.over_budget:
        raise OverBudgetError(f"{cost.summary()}; not launching (raise train.cost.max_cost or "
                              "shrink the run)")
    return cost


@task(name="run training job", cache_policy=NO_CACHE)
async def train_model(training: TrainingPlan) -> tuple[dict[str, Any], float]:
    """Launch the job, stream its log into this task's log, keep a progress artifact current."""
    logger = get_run_logger()
    artifact_id = None
    if reporting.in_prefect_run():
        artifact_id = await acreate_progress_artifact(
            progress=0.0, key=reporting.artifact_key(f"train-{training.version}-progress"),
            description=f"training {MODEL_ARTIFACT}@{training.version}: launching",
        )

    async def on_progress(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start" and event.get("step"):
            logger.info("resumed from the checkpoint at step %s", event["step"])
        elif kind == "checkpoint":
            logger.info("checkpoint saved at step %s", event["step"])
        elif kind in ("log", "eval"):
            logger.info(_describe(event))
        if artifact_id is not None and event.get("max_steps"):
            await aupdate_progress_artifact(
                artifact_id=artifact_id,
                progress=min(100.0, 100.0 * event["step"] / event["max_steps"]),
                description=f"training {MODEL_ARTIFACT}@{training.version}: {_describe(event)}",
            )

    started = time.perf_counter()
    result = await run_training(training, on_line=logger.info, on_progress=on_progress)
    return result, time.perf_counter() - started


@task(name="publish model", cache_policy=NO_CACHE)
def publish(store: ArtifactStore, training: TrainingPlan, result: dict[str, Any],
            wall_seconds: float, cost: CostEstimate) -> Manifest:
    manifest = publish_model(store, training, result, wall_seconds=wall_seconds, estimate=cost)
    signal = result.get("signal")
    if signal:
        # The reward curve's points in the UI; its PNG is the version's reward_curve.png.
        points = [{"step": e["step"], signal: e[signal]} for e in result["log_history"]
                  if signal in e and "step" in e]
        reporting.table(f"{STAGE}-{training.method}-reward-curve", points,
                        f"{signal} per step of {manifest.ref} (PNG: "
                        f"{store.file(manifest.ref, 'reward_curve.png')})")
    return manifest


@flow(name="train",
      description="sft (an sft_dataset), dpo (preferences) or grpo (scenarios, the environments "
      "as tools) with TRL under DeepSpeed ZeRO-3, full parameters or LoRA, launched as a "
      "multi-process job; a model version (weights or adapter, tokenizer, chat template, card, "
      "loss and reward curves) out.")
async def train(config: RunConfig, method: Literal["sft", "dpo", "grpo"] | None = None,
                from_model: str | None = None) -> dict[str, Any]:
    """``method`` and ``from_model`` override train.method and train.from_model (null: as
    configured)."""
    async with open_runtime(config) as runtime:
        store = runtime.store
        training = plan(config, store, method, from_model)
        reused = reused_result(STAGE, store, [MODEL_ARTIFACT], parents=list(training.parents),
                               params=training.params)
        if reused is not None:
            return reused
        cost = estimate(training, config)
        # One run per work dir: a second run of the same inputs (a schedule firing during a
        # manual run, a second click) is refused here, naming the first.
        with work_dir_lock(training.work_dir):
            # A run that held the lock may have published it since the check above.
            reused = reused_result(STAGE, store, [MODEL_ARTIFACT], parents=list(training.parents),
                                   params=training.params)
            if reused is not None:
                return reused
            result, wall_seconds = await train_model(training)
            manifest = publish(store, training, result, wall_seconds, cost)
        return stage_result(STAGE, {MODEL_ARTIFACT: manifest}, reused=False,
                            summary=manifest.stats["summary"], usage=[], store=store)
