"""Stage 5b: `scenarios` (train split) + verified `trajectories` -> a contrastively trained tool
encoder -> `retriever` (training pairs, encoder folder, card)."""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import reused_result, stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest
from agentune.tasks.train_retriever import STAGE
from agentune.tasks.train_retriever.stage import (
    RETRIEVER_ARTIFACT,
    RetrieverPlan,
    TrainedRetriever,
    plan_retriever,
    publish_retriever,
    train_retriever_model,
)


@task(name="plan retriever", cache_policy=NO_CACHE)
async def plan(config: RunConfig, store: ArtifactStore) -> RetrieverPlan:
    return await asyncio.to_thread(plan_retriever, config, store)


@task(name="train encoder", cache_policy=NO_CACHE)
async def train_encoder_task(training: RetrieverPlan, max_seq_length: int,
                             layers: int | None) -> TrainedRetriever:
    logger = get_run_logger()
    logger.info("%d pairs from %d train cases (%d left out as held-out leaks); base %s",
                len(training.pairs), len(training.train_cases), len(training.rejects),
                training.base.version or training.base.name)
    trained = await asyncio.to_thread(train_retriever_model, training, max_seq_length, layers)
    logger.info("positive above hard negative: %.3f before, %.3f after training",
                trained.accuracy_before, trained.accuracy_after)
    return trained


@task(name="publish retriever", cache_policy=NO_CACHE)
def publish(store: ArtifactStore, training: RetrieverPlan, trained: TrainedRetriever) -> Manifest:
    return publish_retriever(store, training, trained)


@flow(name="train_retriever",
      description="Scenarios (train split) and verified trajectories in; a tool encoder trained "
      "with in-batch and BM25 hard negatives; a retriever version (encoder, card) out.")
async def train_retriever(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        if not config.train_retriever.enabled:
            return {"stage": STAGE, "outputs": {}, "reused": False,
                    "summary": [{"what": "disabled (train_retriever.enabled: false)"}]}
        training = await plan(config, store)
        reused = reused_result(STAGE, store, [RETRIEVER_ARTIFACT], parents=training.parents,
                               params=training.params)
        if reused is not None:
            return reused
        cfg = config.train_retriever
        trained = await train_encoder_task(training, cfg.max_seq_length, cfg.base_layers)
        manifest = publish(store, training, trained)
        reporting.table(f"{STAGE}-heldout", manifest.stats["heldout"],
                        "held-out recall@k and MRR: BM25, dense, hybrid")
        return stage_result(STAGE, {RETRIEVER_ARTIFACT: manifest}, reused=False,
                            summary=manifest.stats["summary"], usage=[], store=store)
