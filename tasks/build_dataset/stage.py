"""build_dataset as plain functions: trajectories and general SFT data in; the SFT table (agent and
general rows, a ``split`` column), its rejects and its statistics out.

The order of the steps matters:

1. dedup, exact then near, agent and general data each on their own (one representative per
   cluster: best judge score, then shortest);
2. splits by query set (general rows each their own group), so no set spans two splits;
3. decontamination of train/val rows against the test split's queries and benchmark queries;
4. audit of every agent row with the student's tokenizer and training chat template (rows with
   no trainable token, or over max_length when so configured, are dropped);
5. per split: the agent rows (train capped by coreset selection if configured), then general
   rows in stratified order until agent : general reaches the ratio; general rows are audited
   as they are taken;
6. rows derived from the train split's rows (``derivations.py``: shuffled offers, relevance
   flips, general rows with tools, masked names), each verified (``derived_check.py``) and
   audited. They come after the mix: the agent : general ratio is that of the rows as verified
   (a general row given tools keeps its place), and only train rows are sources.

:func:`build_sft_dataset` knows nothing about Prefect or the store. The stage flow looks the
outputs up by the trajectories version and :func:`dataset_params`, has :func:`run_build` read the
inputs (the version, the general data and benchmark files, the student's tokenizer) and build,
and publishes.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import datasets

from agentune.config import RunConfig
from agentune.config.build_dataset import READS, BuildDatasetConfig, RedisIndexConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.build_dataset import STAGE
from agentune.tasks.build_dataset.coreset import (
    NEEDS_LOSS,
    LossFunction,
    student_losses,
    unigram_losses,
)
from agentune.tasks.build_dataset.decontamination import (
    EvalQuery,
    benchmark_queries,
    decontaminate,
)
from agentune.tasks.build_dataset.dedup import deduplicate_samples
from agentune.tasks.build_dataset.derivations import DERIVATIONS, decision_shares, derive
from agentune.tasks.build_dataset.derived_check import derived_problem
from agentune.tasks.build_dataset.general_data import GeneralSample, load_general_data
from agentune.tasks.build_dataset.mixing import mix_general, stratified_order, take_count
from agentune.tasks.build_dataset.samples import (
    AGENT,
    GENERAL,
    Sample,
    sample_from_general,
    sample_from_trajectory,
)
from agentune.tasks.build_dataset.splits import assign_splits
from agentune.tasks.common.chat_audit import ChatAuditor, RowAudit, audit_summary
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.rejects import Reject, reason_counts
from agentune.tasks.llm.embedded_model import (
    EMBEDDED_DIST_VERSION,
    EMBEDDED_NAME,
    resolve_model_path,
)
from agentune.tasks.orchestration.chunk_map import ChunkMap, chunk_map
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef, file_fingerprint
from agentune.tasks.store.inputs import version_params

SPLITS = ("train", "val", "test")
_OUTPUT_ORDER = {key: i for i, key in enumerate(product(SPLITS, (AGENT, GENERAL)))}
"""Where a split's agent and general rows stand in the output: train agent, train general, val
agent ... (by id within each)."""
# What identifies a student model for the audit: its tokenizer, chat template and config (the
# weights only matter to loss-based selection and are not hashed: gigabytes).
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                "special_tokens_map.json", "vocab.json", "merges.txt")


@dataclass
class DatasetInputs:
    trajectories: Sequence[Mapping[str, Any]]
    trajectories_ref: str
    """The version the rows came from (named in errors and in the card)."""
    general: Sequence[GeneralSample] = ()
    general_rejects: Sequence[Reject] = ()
    general_files: Sequence[str] = ()
    benchmark: Sequence[EvalQuery] = ()
    benchmark_files: Sequence[str] = ()


@dataclass
class DatasetBuild:
    samples: list[Sample]
    """The output rows, train then val then test, agent rows before general ones."""
    rejects: list[Reject] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        return [s.sft_row() for s in self.samples]

    def reject_rows(self) -> list[dict[str, str]]:
        return [r.to_row() for r in self.rejects]


def redis_storage_config(redis: RedisIndexConfig | None, kind: str,
                         version: str | None = None) -> dict[str, Any] | None:
    """datasketch's storage config for a Redis-kept index (None: in memory). With scope
    ``version`` the index is the sft_dataset ``version``'s own."""
    if redis is None:
        return None
    if redis.scope == "version":
        if not version:
            raise ValueError("dataset.near_dup_redis.scope is `version` but no dataset version "
                             "was given to key the index by")
        basename = f"{redis.namespace}:{version}:{kind}"
    else:
        basename = f"{redis.namespace}:{kind}"
    connection: dict[str, Any] = {"host": redis.host, "port": redis.port, "db": redis.db}
    if redis.password_env:
        if redis.password_env not in os.environ:
            raise ValueError(f"dataset.near_dup_redis.password_env: environment variable "
                             f"{redis.password_env} is not set")
        connection["password"] = os.environ[redis.password_env]
    return {"type": "redis", "redis": connection, "basename": basename.encode()}


def agent_samples(inputs: DatasetInputs) -> list[Sample]:
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for i, record in enumerate(inputs.trajectories):
        sample = sample_from_trajectory(record, inputs.trajectories_ref, i)
        if sample.id in seen:
            raise InputError(inputs.trajectories_ref, f"row {i}", "id",
                             f"{sample.id!r} is also the id of row {seen[sample.id]}")
        seen[sample.id] = i
        samples.append(sample)
    return samples


class _Auditing:
    """Audits samples once each and turns failures into rejects."""

    def __init__(self, auditor: ChatAuditor, overlength: str, rejects: list[Reject],
                 form: str = "messages") -> None:
        self.auditor = auditor
        self.form = form
        self.overlength = overlength
        self.rejects = rejects
        self.audits: dict[str, RowAudit] = {}
        self.dropped: Counter[str] = Counter()

    def admit(self, sample: Sample) -> bool:
        audit = (self.auditor.audit_steps(sample.steps) if self.form == "steps"
                 else self.auditor.audit(sample.messages, sample.tools))
        self.audits[sample.id] = audit
        sample.n_tokens, sample.n_trained = audit.n_tokens, audit.n_trained
        if audit.n_trained == 0:
            reason, detail = "no_trainable_tokens", (
                f"no assistant token within max_length {audit.max_length} "
                f"({audit.n_tokens} tokens)")
        elif audit.over_max_length and self.overlength == "drop":
            reason, detail = "over_max_length", f"{audit.n_tokens} tokens > {audit.max_length}"
        else:
            return True
        self.dropped[reason] += 1
        self.rejects.append(Reject(STAGE, reason, sample.id, detail))
        return False

    def tokens_seen(self, sample: Sample) -> int:
        return self.audits[sample.id].tokens_seen


def _counts(samples: Sequence[Sample], key: Callable[[Sample], Any]) -> dict[str, int]:
    counts = Counter(str(key(s)) for s in samples)
    return dict(sorted(counts.items()))


@dataclass
class _Progress:
    """What the steps drop and count as they go: the rejects and the summary's rows."""

    rejects: list[Reject]
    summary: list[dict[str, Any]] = field(default_factory=list)

    def step(self, name: str, before: int, after: int) -> None:
        self.summary.append({"step": name, "in": before, "kept": after, "dropped": before - after})


def _deduplicate(agent: list[Sample], general: list[Sample], cfg: BuildDatasetConfig,
                 progress: _Progress, map_batches: ChunkMap, version: str | None,
                 ) -> tuple[list[Sample], list[Sample], dict[str, Any]]:
    """Exact then near dedup, agent and general data each on their own."""
    kept: dict[str, list[Sample]] = {}
    stats: dict[str, Any] = {}
    for kind, pool in ((AGENT, agent), (GENERAL, general)):
        storage = redis_storage_config(cfg.near_dup_redis, kind, version)
        outcome = deduplicate_samples(pool, cfg, stage=STAGE, storage_config=storage,
                                      map_batches=map_batches)
        if storage:
            outcome.stats["index_key"] = storage["basename"].decode()
        progress.rejects += outcome.rejects
        stats[kind] = outcome.stats
        progress.step(f"{kind} dedup", len(pool), len(outcome.kept))
        kept[kind] = outcome.kept
    return kept[AGENT], kept[GENERAL], stats


def _assign_splits(pools: Sequence[list[Sample]], cfg: BuildDatasetConfig, seed: int) -> None:
    """Each pool split by group (the query set for agent rows), so no group spans two splits."""
    for pool in pools:
        split_of = assign_splits([s.group for s in pool], val_fraction=cfg.val_fraction,
                                 test_fraction=cfg.test_fraction, seed=seed)
        for sample in pool:
            sample.split = split_of[sample.group]


def _decontaminate(agent: list[Sample], general: list[Sample], inputs: DatasetInputs,
                   cfg: BuildDatasetConfig, progress: _Progress,
                   ) -> tuple[list[Sample], list[Sample], dict[str, Any]]:
    """Train/val rows whose query nearly equals a test-split or benchmark query are dropped."""
    stats: dict[str, Any] = {"enabled": cfg.decontaminate}
    if not cfg.decontaminate:
        return agent, general, stats
    eval_queries = [EvalQuery(f"test:{s.id}", s.query) for s in agent + general
                    if s.split == "test"] + list(inputs.benchmark)
    checked = [s for s in agent + general if s.split != "test"]
    outcome = decontaminate(checked, eval_queries, threshold=cfg.decontam_threshold,
                            ngram=cfg.decontam_ngram, stage=STAGE)
    progress.rejects += outcome.rejects
    stats.update(outcome.stats, benchmark_queries=len(inputs.benchmark),
                 benchmark_files=list(inputs.benchmark_files))
    dropped = {r.item_id for r in outcome.rejects}
    progress.step("decontamination", len(checked), len(checked) - len(dropped))
    return ([s for s in agent if s.id not in dropped], [s for s in general if s.id not in dropped],
            stats)


class _PoolLosses:
    """Per-row losses for loss-based selection, each row scored once however often it is asked."""

    def __init__(self, cfg: BuildDatasetConfig, losses: LossFunction | None) -> None:
        self.losses = losses if cfg.selection in NEEDS_LOSS else None
        self.cache: dict[str, float] = {}

    def __call__(self, pool: Sequence[Sample]) -> dict[str, float] | None:
        if self.losses is None:
            return None
        missing = [s for s in pool if s.id not in self.cache]
        if missing:
            self.cache.update(self.losses(missing))
        return self.cache


def _cap_train_agent(split_agent: list[Sample], cfg: BuildDatasetConfig, seed: int,
                     pool_losses: _PoolLosses, progress: _Progress,
                     coreset: dict[str, Any]) -> list[Sample]:
    """The train split's agent rows cut to ``coreset_size`` by the selection strategy."""
    order = stratified_order(split_agent, cfg.selection, seed=f"{seed}:coreset",
                             losses=pool_losses(split_agent), loss_share=cfg.hybrid_loss_share)
    kept_ids = {s.id for s in take_count(order, cfg.coreset_size)}
    for sample in split_agent:
        if sample.id not in kept_ids:
            progress.rejects.append(Reject(STAGE, "coreset_cap", sample.id,
                                           f"not among the {cfg.coreset_size} train rows chosen "
                                           f"by {cfg.selection}"))
    kept = [s for s in split_agent if s.id in kept_ids]
    progress.step("coreset cap (train)", len(split_agent), len(kept))
    coreset.update(pool=len(split_agent), kept=len(kept),
                   strata=_counts(kept, lambda s: "/".join(s.stratum)))
    return kept


def _select_and_mix(agent: list[Sample], general: list[Sample], cfg: BuildDatasetConfig,
                    seed: int, auditing: _Auditing, pool_losses: _PoolLosses,
                    progress: _Progress, losses_origin: str | None,
                    ) -> tuple[list[Sample], dict[str, Any], dict[str, Any]]:
    """Per split: the agent rows (train capped by coreset selection), then general rows in
    stratified order until agent : general reaches the ratio."""
    chosen: list[Sample] = []
    mixing: dict[str, Any] = {}
    coreset: dict[str, Any] = {"size": cfg.coreset_size, "strategy": cfg.selection,
                               "losses": losses_origin if cfg.selection in NEEDS_LOSS else None}
    for split in SPLITS:
        split_agent = [s for s in agent if s.split == split]
        if split == "train" and cfg.coreset_size and len(split_agent) > cfg.coreset_size:
            split_agent = _cap_train_agent(split_agent, cfg, seed, pool_losses, progress, coreset)
        pool = [s for s in general if s.split == split]
        order = stratified_order(pool, cfg.selection, seed=f"{seed}:general:{split}",
                                 losses=pool_losses(pool), loss_share=cfg.hybrid_loss_share)
        mix = mix_general(split_agent, order, ratio=cfg.agent_to_general, by=cfg.mix_by,
                          tokens=auditing.tokens_seen, admit=auditing.admit,
                          examples=(lambda s: len(s.steps)) if auditing.form == "steps"
                          else (lambda s: 1))
        mixing[split] = {**mix.stats, "general_pool": len(pool)}
        chosen += sorted(mix.agent, key=lambda s: s.id) + sorted(mix.general, key=lambda s: s.id)
    return chosen, mixing, coreset


def _derive(chosen: list[Sample], cfg: BuildDatasetConfig, seed: int, form: str,
            auditing: _Auditing, progress: _Progress, verifier: VerifierConfig,
            ) -> tuple[list[Sample], dict[str, Any]]:
    """The rows derived from the train split's chosen rows, each kept only when the verifier
    (``verifier``: the run's settings) passes it (else a ``derived_unverified`` reject) and the
    audit admits it; all rows back in the output order."""
    stats: dict[str, Any] = {"settings": cfg.augment.model_dump(), "form": form}
    if form != "messages":
        stats["note"] = ("none made: the steps form trains template steps, which a derived row "
                         "would need rendered again for its new offer")
        return chosen, stats

    def keep(sample: Sample) -> bool:
        problem = derived_problem(sample, verifier)
        if problem is not None:
            progress.rejects.append(Reject(STAGE, "derived_unverified", sample.id, problem))
            return False
        return auditing.admit(sample)

    train = [s for s in chosen if s.split == "train"]
    made = derive(train, cfg.augment, seed, keep)
    for derivation in DERIVATIONS:
        progress.step(f"derive {derivation} (train)", made.made[derivation],
                      made.kept[derivation])
    rows = [s for s in chosen if s.id not in made.replaced] + made.rows
    ordered = sorted((r for r in rows if (r.split, r.source) in _OUTPUT_ORDER),
                     key=lambda r: (_OUTPUT_ORDER[r.split, r.source], r.id))
    stats.update(made.stats(), train_before=decision_shares(train),
                 train_after=decision_shares(s for s in ordered if s.split == "train"))
    return ordered, stats


def _audit_stats(chosen: Sequence[Sample], auditing: _Auditing,
                 cfg: BuildDatasetConfig) -> dict[str, Any]:
    audits = auditing.audits
    return {
        "tokenizer": auditing.auditor.model_path.name,
        "chat_template": auditing.auditor.template_origin,
        "sample_form": auditing.form,
        "max_length": cfg.max_length,
        "overlength": cfg.overlength,
        "dropped": dict(sorted(auditing.dropped.items())),
        "all": audit_summary([audits[s.id] for s in chosen], cfg.max_length),
        **{f"{split}/{source}": audit_summary(
            [audits[s.id] for s in chosen if s.split == split and s.source == source],
            cfg.max_length)
           for split in SPLITS for source in (AGENT, GENERAL)},
    }


def _input_stats(inputs: DatasetInputs) -> dict[str, Any]:
    return {
        "trajectories": inputs.trajectories_ref,
        "trajectory_rows": len(inputs.trajectories),
        "general_files": list(inputs.general_files),
        "general_rows": len(inputs.general) + len(inputs.general_rejects),
        "benchmark_files": list(inputs.benchmark_files),
    }


def _kind_label(sample: Sample) -> str:
    """The kind a row is counted under: its scenario kind, else ``-`` (a plain query's agent
    row) or ``general``."""
    return sample.kind or ("-" if sample.source == AGENT else GENERAL)


def _count_stats(chosen: Sequence[Sample]) -> dict[str, Any]:
    return {
        "split/source": _counts(chosen, lambda s: f"{s.split}/{s.source}"),
        "source": _counts(chosen, lambda s: s.source if s.source == AGENT
                          else f"{GENERAL} ({s.origin})"),
        "task_type": _counts(chosen, lambda s: s.task_type),
        "template_source": _counts([s for s in chosen if s.source == AGENT],
                                   lambda s: s.template_source),
        "lang": _counts(chosen, lambda s: s.lang),
        "kind": _counts(chosen, _kind_label),
        "derivation": _counts(chosen, lambda s: s.derivation),
        "split/derivation": _counts(chosen, lambda s: f"{s.split}/{s.derivation}"),
        "kind/derivation/lang": _counts(
            chosen, lambda s: f"{_kind_label(s)}/{s.derivation}/{s.lang}"),
        "sets": {split: len({s.set_id for s in chosen if s.split == split and s.set_id})
                 for split in SPLITS},
    }


def build_sft_dataset(
    inputs: DatasetInputs, cfg: BuildDatasetConfig, *, seed: int, auditor: ChatAuditor,
    losses: LossFunction | None = None, losses_origin: str | None = None,
    map_batches: ChunkMap = map, form: str = "messages", version: str | None = None,
    verifier: VerifierConfig | None = None,
) -> DatasetBuild:
    """The whole stage on loaded inputs, in the order the module docstring gives. ``losses``
    scores pools for loss-based selection; ``losses_origin`` says what the scores are, for the
    card. ``map_batches`` computes the near-dup signatures (in process, or on Dask).
    ``version`` is the sft_dataset version being built: it keys a Redis near-dup index.
    ``verifier``: the run's verifier settings, which judge the derived rows (default: the
    verifier's defaults)."""
    if cfg.selection in NEEDS_LOSS and losses is None:
        raise ValueError(f"selection {cfg.selection!r} needs a loss function")
    progress = _Progress(rejects=list(inputs.general_rejects))
    agent, general, dedup_stats = _deduplicate(
        agent_samples(inputs), [sample_from_general(g) for g in inputs.general], cfg, progress,
        map_batches, version)
    _assign_splits((agent, general), cfg, seed)
    agent, general, decontam_stats = _decontaminate(agent, general, inputs, cfg, progress)
    # General rows are audited as mixing takes them; the agent rows all at once, here.
    auditing = _Auditing(auditor, cfg.overlength, progress.rejects, form)
    before = len(agent)
    agent = [s for s in agent if auditing.admit(s)]
    progress.step("agent audit", before, len(agent))
    chosen, mixing, coreset = _select_and_mix(agent, general, cfg, seed, auditing,
                                              _PoolLosses(cfg, losses), progress, losses_origin)
    chosen, derivations = _derive(chosen, cfg, seed, form, auditing, progress,
                                  verifier or VerifierConfig())
    if not any(s.source == AGENT for s in chosen):
        raise ValueError(f"{inputs.trajectories_ref}: no agent row is left to train on "
                         f"(dropped: {reason_counts(progress.rejects)})")
    stats = {
        "rows": len(chosen),
        "inputs": _input_stats(inputs),
        "counts": _count_stats(chosen),
        "dedup": dedup_stats,
        "decontamination": decontam_stats,
        "mixing": mixing,
        "coreset": coreset,
        "derivations": derivations,
        "audit": _audit_stats(chosen, auditing, cfg),
        "rejects": reason_counts(progress.rejects),
        "summary": progress.summary,
    }
    return DatasetBuild(chosen, progress.rejects, stats)


# --------------------------------------------------------------------------- the stored version


def model_identity(name: str) -> dict[str, Any]:
    if name == EMBEDDED_NAME:
        return {"embedded": EMBEDDED_DIST_VERSION}
    folder = resolve_model_path(name)
    return {"files": {f: file_fingerprint(folder / f) for f in _MODEL_FILES
                      if (folder / f).is_file()}}


def sample_form(config: RunConfig) -> str:
    """The form the dataset is audited and mixed in: the one it will be trained in."""
    return config.dataset.sample_form or config.train.sample_form


def dataset_params(config: RunConfig) -> dict[str, Any]:
    """What decides the outputs besides the input version: what the stage reads (``READS``), the
    student by its tokenizer and template files."""
    return version_params(config, READS,
                          {"dataset.student_model": model_identity(config.dataset.student_model)})


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
                                 form=sample_form(config), version=version,
                                 verifier=config.verifier)
