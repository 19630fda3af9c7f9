"""The train_retriever stage's work as plain functions, in the order the flow runs them.

:func:`plan_retriever` reads the inputs (the scenarios version, the trajectories version when
one is published, the tool catalog, the base encoder), builds the training pairs from the train
split only and fixes the id of the ``retriever`` version; :func:`train_retriever_model` trains
the encoder in the version's work dir and measures it before and after (pair accuracy on the
training pairs, recall@5 / MRR on the held-out and reserved scenarios); :func:`publish_retriever`
publishes the pairs as the table, the encoder folder and its card as files.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.config.train_retriever import READS
from agentune.tasks.environments.catalog import configured_environments, fingerprint
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.llm.model_folders import ModelFolder, resolve_model
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    Manifest,
    StoreError,
    VersionRef,
)
from agentune.tasks.store.inputs import version_params
from agentune.tasks.tool_retrieval.encoder import (
    ENCODER_FOLDER,
    EncoderTraining,
    load_encoder,
    pair_accuracy,
    train_encoder,
)
from agentune.tasks.tool_retrieval.evaluation import RetrievalScores, score_retrieval
from agentune.tasks.tool_retrieval.pairs import (
    RetrievalCase,
    TrainingPair,
    scenario_cases,
    training_cases,
    training_pairs,
    trajectory_cases,
)
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.train_retriever.card import render_card

RETRIEVER_ARTIFACT = "retriever"


@dataclass
class RetrieverPlan:
    scenarios: VersionRef
    trajectories: VersionRef | None
    base: ModelFolder
    tools: list[ToolSpec]
    train_cases: list[RetrievalCase]
    eval_cases: list[RetrievalCase]
    pairs: list[TrainingPair]
    rejects: list[dict[str, str]]
    settings: EncoderTraining
    params: dict[str, Any]
    version: str
    work_dir: Path

    @property
    def parents(self) -> list[VersionRef]:
        return [p for p in (self.scenarios, self.trajectories, self.base.version) if p]


@dataclass
class TrainedRetriever:
    folder: Path
    log: list[dict[str, Any]]
    accuracy_before: float
    accuracy_after: float
    before: RetrievalScores = field(default_factory=RetrievalScores)
    after: RetrievalScores = field(default_factory=RetrievalScores)


def resolve_base_encoder(spec: str, store: ArtifactStore) -> ModelFolder:
    """``embedded``, a folder on disk, or a ``retriever`` version to train further."""
    try:
        return resolve_model(spec, store, artifact=RETRIEVER_ARTIFACT, subfolder=ENCODER_FOLDER)
    except StoreError as exc:
        raise FileNotFoundError(f"train_retriever.base_model {spec!r}: neither `embedded`, a "
                                f"folder nor a published version ({exc})") from None


def _optional(store: ArtifactStore, spec: str | None) -> VersionRef | None:
    if not spec:
        return None
    try:
        return store.resolve(spec)
    except StoreError:
        return None


def plan_retriever(config: RunConfig, store: ArtifactStore) -> RetrieverPlan:
    cfg = config.train_retriever
    scenarios_ref = store.resolve(cfg.scenarios)
    records = read_scenario_rows(list(store.read(scenarios_ref).to_dict("records")),
                                 str(scenarios_ref))
    catalog = configured_environments(config.environments)
    tools = catalog.tools()
    cases = scenario_cases(records)
    trajectories_ref = _optional(store, cfg.trajectories)
    from_trajectories: list[RetrievalCase] = []
    links: dict[str, str | None] = {}
    if trajectories_ref is not None:
        rows = list(store.read(trajectories_ref).to_dict("records"))
        decoded = [{**r, "messages": _json_list(r.get("messages"))} for r in rows]
        from_trajectories = trajectory_cases(decoded, [t.name for t in tools])
        links = {str(r.get("id")): r.get("scenario_id") for r in rows}
    train_cases, rejects = training_cases(cases, from_trajectories, trajectory_scenarios=links)
    pairs = training_pairs(train_cases, tools, hard_negatives=cfg.hard_negatives,
                           cross_language=cfg.cross_language, seed=config.seed)
    base = resolve_base_encoder(cfg.base_model, store)
    settings = EncoderTraining(epochs=cfg.epochs, max_steps=cfg.max_steps,
                               batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                               warmup_ratio=cfg.warmup_ratio, scale=cfg.scale, seed=config.seed)
    params = version_params(config, READS, {"train_retriever.base_model": base.identity,
                                            "environments.catalog": fingerprint(catalog)})
    plan = RetrieverPlan(scenarios_ref, trajectories_ref, base, tools, train_cases,
                         [c for c in cases if c.split != "train"], pairs, rejects, settings,
                         params, "", Path())
    plan.version = store.version_id(RETRIEVER_ARTIFACT, parents=plan.parents, params=params)
    plan.work_dir = Path(cfg.work_dir) / plan.version
    return plan


def _json_list(value: Any) -> list[Any]:
    """A Json list cell as pandas may give it: decoded, a JSON string, or an array."""
    if value is None:
        return []
    if isinstance(value, str):
        return list(json.loads(value))
    return [json.loads(v) if isinstance(v, str) else v for v in list(value)]


def train_retriever_model(plan: RetrieverPlan, max_seq_length: int,
                          layers: int | None = None) -> TrainedRetriever:
    """Train, save the encoder to ``<work_dir>/encoder``, and measure it before and after."""
    encoder = load_encoder(plan.base.path, max_seq_length=max_seq_length, layers=layers)
    before = score_retrieval(plan.eval_cases, plan.tools, encoder, catalog="heldout")
    accuracy_before = pair_accuracy(encoder, plan.pairs)
    log = train_encoder(encoder, plan.pairs, plan.work_dir / "trainer", plan.settings)
    folder = plan.work_dir / ENCODER_FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    encoder.save(str(folder))
    after = score_retrieval(plan.eval_cases, plan.tools, encoder, catalog="heldout")
    splits = sorted({c.split for c in plan.eval_cases})
    if "natural" in splits:  # generated scenarios: each evaluation split on its own line too
        for split in splits:
            part = score_retrieval([c for c in plan.eval_cases if c.split == split], plan.tools,
                                   encoder, catalog=f"heldout:{split}", conditions=("all",))
            after.rows += part.rows
            after.misses += part.misses
    return TrainedRetriever(folder, log, accuracy_before, pair_accuracy(encoder, plan.pairs),
                            before, after)


def _recall5(scores: RetrievalScores, retriever: str, condition: str) -> float | None:
    for row in scores.rows:
        if row["retriever"] == retriever and row["condition"] == condition:
            return round(row["recall@5"], 4)
    return None


def summary_rows(plan: RetrieverPlan, trained: TrainedRetriever) -> list[dict[str, Any]]:
    rows = [{"what": "train cases", "value": len(plan.train_cases)},
            {"what": "pairs", "value": len(plan.pairs)},
            {"what": "cross-language pairs", "value": sum(p.view == "en" for p in plan.pairs)},
            {"what": "left out (held-out leak)", "value": len(plan.rejects)},
            {"what": "pair accuracy before", "value": round(trained.accuracy_before, 4)},
            {"what": "pair accuracy after", "value": round(trained.accuracy_after, 4)}]
    for condition in ("all", "cross"):
        for name in ("bm25", "hybrid"):
            rows.append({"what": f"held-out recall@5 {condition} {name}",
                         "value": _recall5(trained.after, name, condition)})
    rows += [{"what": f"{r['catalog'].split(':', 1)[1]} recall@5 {r['retriever']}",
              "value": round(r["recall@5"], 4)}
             for r in trained.after.rows if r["catalog"].startswith("heldout:")]
    return rows


def publish_retriever(store: ArtifactStore, plan: RetrieverPlan, trained: TrainedRetriever
                      ) -> Manifest:
    summary = summary_rows(plan, trained)
    card = plan.work_dir / "README.md"
    card.write_text(render_card(plan=plan, trained=trained, version=plan.version),
                    encoding="utf-8")
    manifest = store.publish(
        RETRIEVER_ARTIFACT, [p.row() for p in plan.pairs], parents=plan.parents,
        params=plan.params,
        stats={"summary": summary, "rejects": plan.rejects,
               "heldout": trained.after.rows, "heldout_before": trained.before.rows,
               "settings": asdict(plan.settings)},
        files={ENCODER_FOLDER: trained.folder, "README.md": card},
        description="tool retriever: the training pairs; __files__/encoder (sentence-"
        "transformers folder) and README.md (card)")
    if manifest.version != plan.version:
        raise StoreError(f"{RETRIEVER_ARTIFACT}: published {manifest.version}, planned "
                         f"{plan.version} (the code changed during the run?)")
    return manifest
