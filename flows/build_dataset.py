"""Stage 4: `trajectories` -> deduplicated, decontaminated, split, mixed and audited `sft_dataset`
(Parquet with a `split` column and a dataset card), plus `rejects`."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.build_dataset import STAGE
from agentune.tasks.build_dataset.card import PNG, plot_rows, render_card
from agentune.tasks.build_dataset.stage import DatasetBuild, dataset_params, run_build
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.orchestration.stage_outputs import reused_result, stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef

OUTPUTS = ("sft_dataset", "rejects")
CARD = "README.md"


@task(name="build sft dataset", cache_policy=NO_CACHE)
async def build(config: RunConfig, store: ArtifactStore, parent: VersionRef,
                version: str) -> DatasetBuild:
    return await asyncio.to_thread(run_build, config, store, parent, version)


@flow(name="build_dataset", description="Trajectories in; deduplicated, decontaminated, split, "
      "general-data-mixed and audited SFT dataset (Parquet + dataset card) out.")
async def build_dataset(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        parent = store.resolve(config.dataset.trajectories)
        params = dataset_params(config)
        reused = reused_result(STAGE, store, OUTPUTS, parents=[parent],
                               params=params)
        if reused is not None:
            return reused
        version = store.version_id("sft_dataset", parents=[parent], params=params)
        result = await build(config, store, parent, version)
        with tempfile.TemporaryDirectory(prefix="agentune-card-") as tmp:
            card = Path(tmp) / CARD
            card.write_text(render_card(result.stats, title=f"sft_dataset@{version}"),
                            encoding="utf-8")
            png = plot_rows(result.stats, Path(tmp) / PNG, title=f"sft_dataset@{version}")
            manifests = {
                "sft_dataset": store.publish(
                    "sft_dataset", result.rows(), parents=[parent], params=params,
                    stats=result.stats, features=SFT_FEATURES, files={CARD: card, PNG: png},
                    description="SFT rows (agent + general) with a split column; card in "
                    f"__files__/{CARD}"),
                "rejects": store.publish(
                    "rejects", result.reject_rows(),
                    parents=[parent], params=params,
                    stats={"rejects": len(result.rejects)}, features=REJECT_FEATURES,
                    description="every row dropped by build_dataset, with the reason"),
            }
        return stage_result(STAGE, manifests, reused=False, summary=result.stats["summary"],
                            usage=[], store=store)
