"""Stage 4: `trajectories` -> deduplicated, decontaminated, split, mixed and audited `sft_dataset`
(Parquet with a `split` column and a dataset card), plus `rejects`."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import datasets
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.build_dataset import STAGE
from agentune.tasks.build_dataset.card import render_card
from agentune.tasks.build_dataset.coreset import (
    NEEDS_LOSS,
    LossFunction,
    student_losses,
    unigram_losses,
)
from agentune.tasks.build_dataset.decontamination import benchmark_queries
from agentune.tasks.build_dataset.general_data import load_general_data
from agentune.tasks.build_dataset.stage import (
    DatasetBuild,
    DatasetInputs,
    build_sft_dataset,
)
from agentune.tasks.common.chat_audit import ChatAuditor
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.llm.embedded_model import (
    EMBEDDED_DIST_VERSION,
    EMBEDDED_NAME,
    resolve_model_path,
)
from agentune.tasks.orchestration.chunk_map import chunk_map
from agentune.tasks.orchestration.stage_outputs import reused_result, stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef, file_fingerprint

OUTPUTS = ("sft_dataset", "rejects")
CARD = "README.md"
# What identifies a student model for the audit: its tokenizer, chat template and config (the
# weights only matter to loss-based selection and are not hashed: gigabytes).
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                "special_tokens_map.json", "vocab.json", "merges.txt")


def model_identity(name: str) -> dict[str, Any]:
    if name == EMBEDDED_NAME:
        return {"embedded": EMBEDDED_DIST_VERSION}
    folder = resolve_model_path(name)
    return {"files": {f: file_fingerprint(folder / f) for f in _MODEL_FILES
                      if (folder / f).is_file()}}


def dataset_params(config: RunConfig) -> dict[str, Any]:
    """What decides the outputs besides the input version: settings, input file contents, the
    student's tokenizer and template, the seed."""
    cfg = config.dataset
    return {
        "settings": cfg.model_dump(exclude={"trajectories", "general_data", "benchmark_files",
                                            "chat_template", "student_model"}),
        "general_data_sha256": [file_fingerprint(p) for p in cfg.general_data],
        "benchmark_sha256": [file_fingerprint(p) for p in cfg.benchmark_files],
        "chat_template_sha256": file_fingerprint(cfg.chat_template) if cfg.chat_template else None,
        "student_model": model_identity(cfg.student_model),
        "sample_form": sample_form(config),
        "seed": config.seed,
    }


def sample_form(config: RunConfig) -> str:
    """The form the dataset is audited and mixed in: the one it will be trained in."""
    return config.dataset.sample_form or config.train.sample_form


def loss_function(config: RunConfig, auditor: ChatAuditor,
                  model_path: Path) -> tuple[LossFunction | None, str | None]:
    """The per-row loss for loss-based selection, and what it is (for the card)."""
    cfg = config.dataset
    if cfg.selection not in NEEDS_LOSS:
        return None, None
    if cfg.loss_from == "student":
        return (lambda pool: student_losses(pool, auditor, model_path),
                f"mean assistant-token loss of the student model ({cfg.student_model})")
    return (lambda pool: unigram_losses(pool, auditor),
            "unigram-surprisal proxy (mean -log p of assistant tokens under the pool's unigram "
            "model; no model run)")


def run_build(config: RunConfig, store: ArtifactStore, parent: VersionRef,
              version: str | None = None) -> DatasetBuild:
    """Load the inputs and build ``version`` of sft_dataset (plain function: the flow runs it
    in a worker thread)."""
    cfg = config.dataset
    # Through datasets rather than pandas: Json columns decoded, nulls stay None.
    trajectories = datasets.Dataset(store.read_arrow(parent))
    general, general_rejects = load_general_data(cfg.general_data, split=cfg.general_split,
                                                 stage=STAGE)
    benchmark = [q for path in cfg.benchmark_files
                 for q in benchmark_queries(path, cfg.benchmark_query_field)]
    model_path = resolve_model_path(cfg.student_model)
    auditor = ChatAuditor(model_path, max_length=cfg.max_length, chat_template=cfg.chat_template)
    inputs = DatasetInputs(
        trajectories=trajectories, trajectories_ref=str(parent), general=general,
        general_rejects=general_rejects, general_files=[Path(p).name for p in cfg.general_data],
        benchmark=benchmark, benchmark_files=[Path(p).name for p in cfg.benchmark_files],
    )
    losses, origin = loss_function(config, auditor, model_path)
    with chunk_map(config.runner) as map_batches:
        return build_sft_dataset(inputs, cfg, seed=config.seed, auditor=auditor, losses=losses,
                                 losses_origin=origin, map_batches=map_batches,
                                 form=sample_form(config), version=version)


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
            manifests = {
                "sft_dataset": store.publish(
                    "sft_dataset", result.rows(), parents=[parent], params=params,
                    stats=result.stats, features=SFT_FEATURES, files={CARD: card},
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
