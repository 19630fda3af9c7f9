"""The KAgentBench-format suites and each model's answers to them.

1. :func:`prepare_suites`: the suites, each a versioned ``eval_benchmark`` (its JSONL in
   ``__files__/benchmark.jsonl``): agentune's held-out benchmark from an ``sft_dataset`` test
   split, and/or a KAgentBench file the user brings.
2. :func:`answer_suites`: one model's answers to each suite, each a versioned
   ``eval_predictions`` (the official prediction file in ``__files__/predictions.jsonl``), reused
   when the same model, benchmark and decoding were already run.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from agentune.config import RunConfig
from agentune.config.evaluate import PREDICTION_READS
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    SAMPLE_TYPES,
    BenchSample,
    SourceLine,
    load_benchmark,
    parse_sample,
    read_jsonl,
    write_jsonl,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.heldout import build_heldout
from agentune.tasks.evaluate.benchmarks.kagentbench.inference import (
    PredictionRun,
    PromptCutter,
    predict_benchmark,
)
from agentune.tasks.evaluate.models import EvaluationInputError, ResolvedModel
from agentune.tasks.evaluate.prompt_templates import choose_templates
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.rollouts.driver import Progress
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    Manifest,
    StoreError,
    VersionRef,
    file_fingerprint,
)
from agentune.tasks.store.inputs import version_params

BENCHMARK_ARTIFACT = "eval_benchmark"
PREDICTIONS_ARTIFACT = "eval_predictions"
BENCHMARK_FILE = "benchmark.jsonl"
PREDICTIONS_FILE = "predictions.jsonl"
HELDOUT, KAGENTBENCH = "heldout", "kagentbench"


log = logging.getLogger("agentune.evaluate")


@dataclass
class Suite:
    """One benchmark, published."""

    name: str
    samples: list[BenchSample]
    manifest: Manifest
    reused: bool

    @property
    def ref(self) -> VersionRef:
        return self.manifest.ref


def _sample_rows(samples: Sequence[BenchSample]) -> list[dict[str, Any]]:
    return [{"id": str(s.id), "type": s.type, "query": s.query, "lang": s.lang,
             "query_id": s.query_id, "templates": sorted(s.prompts), "goldens": len(s.goldens)}
            for s in samples]


def _read_suite(store: ArtifactStore, manifest: Manifest, name: str) -> Suite:
    path = store.file(manifest.ref, BENCHMARK_FILE)
    return Suite(name, load_benchmark(path).samples, manifest, reused=True)


def _publish_suite(store: ArtifactStore, name: str, lines: Sequence[Mapping[str, Any]], *,
                   parents: Sequence[VersionRef], params: Mapping[str, Any],
                   stats: Mapping[str, Any], description: str) -> Suite:
    with tempfile.TemporaryDirectory(prefix="agentune-eval-") as tmp:
        path = write_jsonl(Path(tmp) / BENCHMARK_FILE, lines)
        samples = load_benchmark(path).samples  # what we wrote must read back as valid
        counts = {t: sum(s.type == t for s in samples) for t in SAMPLE_TYPES}
        manifest = store.publish(
            BENCHMARK_ARTIFACT, _sample_rows(samples), parents=parents, params=params,
            stats={**stats, "samples": counts, "prompts": sum(max(1, len(s.prompts))
                                                              for s in samples)},
            files={BENCHMARK_FILE: path}, description=description)
    return Suite(name, samples, manifest, reused=False)


def _lineage(store: ArtifactStore, ref: VersionRef, name: str) -> VersionRef | None:
    """The nearest ancestor version of artifact ``name``."""
    todo, seen = [ref], set()
    while todo:
        current = todo.pop(0)
        if current in seen or not store.exists(current):
            continue
        seen.add(current)
        for parent in store.manifest(current).parent_refs:
            if parent.name == name:
                return parent
            todo.append(parent)
    return None


def _table(store: ArtifactStore, ref: VersionRef) -> list[dict[str, Any]]:
    """A version's rows with Json columns decoded and nulls as None."""
    return list(datasets.Dataset(store.read_arrow(ref)))


def heldout_suite(config: RunConfig, store: ArtifactStore) -> Suite:
    cfg = config.evaluate
    try:
        dataset = store.resolve(cfg.dataset or "sft_dataset")
    except StoreError as exc:
        raise EvaluationInputError(
            f"evaluate.heldout needs an sft_dataset version ({exc}): run build_dataset first, "
            "or set evaluate.heldout false and evaluate.kagentbench_file") from None
    templates = (store.resolve(cfg.templates) if cfg.templates else
                 _lineage(store, dataset, "templates"))
    if templates is None and "templates" in store.names():
        templates = store.resolve("templates")
    parents = [dataset] + ([templates] if templates else [])
    unseen = config.templates.unseen_templates
    params = {"suite": HELDOUT, "seed": config.seed, "settings": {**cfg.model_dump(
        mode="json", include={"benchmark_templates", "max_queries", "max_profile",
                              "current_time"}), "unseen_templates": unseen}}
    found = store.find(BENCHMARK_ARTIFACT, parents=parents, params=params)
    if found is not None:
        return _read_suite(store, found, HELDOUT)
    rows = _table(store, dataset)
    template_rows = _table(store, templates) if templates else []
    seen_ids = {str(r.get("template_id")) for r in rows
                if r.get("split") == "train" and r.get("source") == "agent"}
    chosen, skipped = choose_templates(
        benchmark=cfg.benchmark_templates, template_rows=template_rows, seen_ids=seen_ids,
        unseen=unseen, seed=config.seed, origin=str(templates))
    bench = build_heldout(rows, templates=chosen, template_rows=template_rows,
                          now=cfg.current_time, seed=config.seed, max_queries=cfg.max_queries,
                          max_profile=cfg.max_profile, origin=str(dataset))
    if not bench.lines:
        raise EvaluationInputError(f"{dataset} has no usable test-split rows: nothing to "
                                   "evaluate on (is test_fraction 0?)")
    return _publish_suite(
        store, HELDOUT, bench.lines, parents=parents, params=params,
        stats={"skipped": skipped + bench.skipped,
               "templates": {t.key: t.record() for t in chosen}},
        description=f"held-out benchmark (KAgentBench format) from the test split of {dataset}")


def kagentbench_suite(config: RunConfig, store: ArtifactStore) -> Suite:
    cfg = config.evaluate
    assert cfg.kagentbench_file is not None
    path = Path(cfg.kagentbench_file)
    params = {"suite": KAGENTBENCH, "file_sha256": file_fingerprint(path),
              "max_per_type": cfg.kagentbench_max_per_type}
    found = store.find(BENCHMARK_ARTIFACT, parents=[], params=params)
    if found is not None:
        return _read_suite(store, found, KAGENTBENCH)
    bench = load_benchmark(path)
    taken: dict[str, int] = {}
    lines = []
    for sample in bench.samples:
        taken[sample.type] = taken.get(sample.type, 0) + 1
        cap = cfg.kagentbench_max_per_type
        if cap is None or taken[sample.type] <= cap:
            lines.append(sample.raw)
    return _publish_suite(store, KAGENTBENCH, lines, parents=[], params=params,
                          stats={"file": path.name, "duplicate_lines": bench.duplicates},
                          description=f"KAgentBench samples from {path.name}")


def prepare_suites(config: RunConfig, store: ArtifactStore) -> list[Suite]:
    suites = []
    if config.evaluate.heldout:
        try:
            suites.append(heldout_suite(config, store))
        except EvaluationInputError as exc:
            # A dataset too small to hold a test split still gets the user's benchmark scored;
            # with nothing else to score, the error stands.
            if not config.evaluate.kagentbench_file:
                raise
            log.warning("held-out benchmark skipped: %s", exc)
    if config.evaluate.kagentbench_file:
        suites.append(kagentbench_suite(config, store))
    return suites


@dataclass
class Answers:
    suite: str
    model: str
    samples: list[BenchSample]
    manifest: Manifest
    reused: bool
    failures: int


def prediction_params(config: RunConfig, model: ResolvedModel) -> dict[str, Any]:
    """The decoding settings the answers read (``PREDICTION_READS``) and the model."""
    return {**version_params(config, PREDICTION_READS), "model": model.identity}


def _prediction_parents(suite: Suite, model: ResolvedModel) -> list[VersionRef]:
    return [suite.ref] + ([model.parent] if model.parent else [])


def _read_answers(store: ArtifactStore, manifest: Manifest, suite: str, model: str) -> Answers:
    path = store.file(manifest.ref, PREDICTIONS_FILE)
    samples = [parse_sample(obj, SourceLine(str(path), n), with_prediction=True)
               for n, obj in read_jsonl(path)]
    return Answers(suite, model, samples, manifest, True,
                   int(manifest.stats.get("failures", 0)))


def existing_answers(config: RunConfig, store: ArtifactStore, suite: Suite,
                     model: ResolvedModel) -> Answers | None:
    found = store.find(PREDICTIONS_ARTIFACT, parents=_prediction_parents(suite, model),
                       params=prediction_params(config, model))
    return None if found is None else _read_answers(store, found, suite.name, model.label)


async def answer_suites(config: RunConfig, store: ArtifactStore, suites: Sequence[Suite],
                        model: ResolvedModel,
                        progress: Callable[[str], Progress] | None = None) -> list[Answers]:
    """The model's answers to every prompt of each suite. Published answers are reused; the
    model is loaded once for the suites still to answer. ``progress``: a suite's progress
    reporter, given its name."""
    answers = {s.name: existing_answers(config, store, s, model) for s in suites}
    todo = [s for s in suites if answers[s.name] is None]
    if todo:
        llm = config.llm.with_student(model.role)
        cutter = PromptCutter.for_model(config.evaluate.max_prompt_tokens, model.tokenizer)
        async with LLMGateway(llm) as gateway:
            for suite in todo:
                stage = f"{STAGE}:{suite.name}"
                run = await predict_benchmark(
                    suite.samples, gateway, stage=stage, settings=config.evaluate,
                    seed=config.seed, cutter=cutter,
                    on_progress=progress(suite.name) if progress else None)
                # Per model, not per gateway role: every model answers as the "student".
                usage = [{**u, "role": model.label} for u in gateway.usage_rows()
                         if u["stage"] == stage]
                answers[suite.name] = _publish_answers(config, store, suite, model, run, usage)
    return [a for a in (answers[s.name] for s in suites) if a is not None]


def _publish_answers(config: RunConfig, store: ArtifactStore, suite: Suite,
                     model: ResolvedModel, run: PredictionRun,
                     usage: list[dict[str, Any]]) -> Answers:
    rows = [{"sample_id": str(line["id"]), "type": line["type"], "key": key, "answer": answer}
            for line in run.lines
            for key, answer in (line["model_predict"].items()
                                if isinstance(line["model_predict"], dict)
                                else [("prompt", line["model_predict"])])]
    with tempfile.TemporaryDirectory(prefix="agentune-eval-") as tmp:
        path = write_jsonl(Path(tmp) / PREDICTIONS_FILE, run.lines)
        manifest = store.publish(
            PREDICTIONS_ARTIFACT, rows, parents=_prediction_parents(suite, model),
            params=prediction_params(config, model),
            stats={"model": model.label, "prompts": run.prompts, "cut_prompts": run.cut,
                   "failures": len(run.failures), "failure_examples": run.failures[:20],
                   "usage": usage},
            files={PREDICTIONS_FILE: path},
            description=f"{model.label} ({model.role.model}) on {suite.ref}: official "
            f"prediction file in __files__/{PREDICTIONS_FILE}")
    samples = [parse_sample(line, SourceLine(PREDICTIONS_FILE, i), with_prediction=True)
               for i, line in enumerate(run.lines, 1)]
    return Answers(suite.name, model.label, samples, manifest, False, len(run.failures))
