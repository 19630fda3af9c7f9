"""The evaluate stage's work as plain functions, in the order the flow runs them.

1. :func:`prepare_suites`: the benchmarks, each a versioned ``eval_benchmark`` (its JSONL in
   ``__files__/benchmark.jsonl``): agentune's held-out benchmark from an ``sft_dataset`` test
   split, and/or a KAgentBench file the user brings.
2. :func:`resolve_models`: each listed model as a gateway role (the embedded model, a local
   folder, a trained ``model`` version, or an OpenAI-compatible endpoint).
3. :func:`answer_suites`: one model's answers to each suite, each a versioned
   ``eval_predictions`` (the official prediction file in ``__files__/predictions.jsonl``), reused
   when the same model, benchmark and decoding were already run.
4. :func:`build_report`: KAgentBench scores and tool-use metrics per model, the human-review
   sheet and imported reviews, and the comparison, published as ``eval_report``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from agentune.config import RunConfig
from agentune.config.evaluate import EvalModelConfig, EvaluateConfig
from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.bfcl.report import bfcl_markdown, bfcl_rows, bfcl_summary
from agentune.tasks.evaluate.bfcl.run import BfclRun
from agentune.tasks.evaluate.closed_loop import RolloutRun
from agentune.tasks.evaluate.closed_loop_report import (
    closed_loop_markdown,
    closed_loop_summary,
    plot_closed_loop,
)
from agentune.tasks.evaluate.heldout import build_heldout, choose_templates
from agentune.tasks.evaluate.human_eval import (
    read_reviews,
    review_items,
    review_sheet,
    usable_rates,
    write_review_sheet,
)
from agentune.tasks.evaluate.inference import (
    PredictionRun,
    PromptCutter,
    predict_benchmark,
)
from agentune.tasks.evaluate.kagentbench.format import (
    SAMPLE_TYPES,
    BenchSample,
    SourceLine,
    load_benchmark,
    parse_sample,
    read_jsonl,
    write_jsonl,
)
from agentune.tasks.evaluate.kagentbench.scoring import ScoringOptions, score_samples
from agentune.tasks.evaluate.report import (
    ComparisonReport,
    ModelScores,
    comparison,
    plot_comparison,
)
from agentune.tasks.evaluate.retrieval import RetrievalEvaluation
from agentune.tasks.evaluate.tool_metrics import tool_use_values
from agentune.tasks.llm.embedded_model import named_model_identity, resolve_model_path
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.rollouts.closed_loop import ClosedLoopScores
from agentune.tasks.store.artifact_store import (
    ArtifactStore,
    Manifest,
    StoreError,
    VersionRef,
    file_fingerprint,
)

BENCHMARK_ARTIFACT = "eval_benchmark"
PREDICTIONS_ARTIFACT = "eval_predictions"
REPORT_ARTIFACT = "eval_report"
BENCHMARK_FILE = "benchmark.jsonl"
PREDICTIONS_FILE = "predictions.jsonl"
HELDOUT, KAGENTBENCH = "heldout", "kagentbench"


log = logging.getLogger("agentune.evaluate")

class EvaluationInputError(ValueError):
    """An input the evaluate stage cannot use; the message says which and what to do."""


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


# --------------------------------------------------------------------------- models


@dataclass
class ResolvedModel:
    label: str
    role: RoleConfig
    identity: dict[str, Any]
    """What decides its answers besides the prompts: the weights (or endpoint and name)."""
    parent: VersionRef | None
    tokenizer: Path | None
    """Folder of the tokenizer that counts prompt tokens; None: characters."""


def _local_model(cfg: EvalModelConfig, store: ArtifactStore
                 ) -> tuple[str, dict[str, Any], VersionRef | None]:
    named = named_model_identity(cfg.model)  # `embedded`, `qwen2.5-coder-0.5b` ...
    if named is not None:
        resolve_model_path(cfg.model)  # prepared? (an optional model is skipped if not)
        return cfg.model, named, None
    folder = Path(cfg.model).expanduser()
    if folder.is_dir():
        # Every file hashed: a folder retrained in place must not reuse old answers.
        return str(folder), {"folder_sha256": file_fingerprint(folder)}, None
    ref = store.resolve(cfg.model)
    path = store.file(ref, "model")
    return str(path), {"version": str(ref)}, ref


def resolve_models(config: EvaluateConfig, store: ArtifactStore
                   ) -> tuple[list[ResolvedModel], list[str]]:
    """The models to evaluate, and a note for each optional one that is not there."""
    models, skipped = [], []
    for cfg in config.models:
        common = {"max_concurrency": cfg.max_concurrency, "timeout_s": cfg.timeout_s,
                  "default_max_tokens": config.max_tokens}
        if cfg.provider == "openai":
            role = RoleConfig(provider="openai", model=cfg.model, base_url=cfg.base_url,
                              api_key_env=cfg.api_key_env, **common)
            tokenizer = resolve_model_path(cfg.tokenizer) if cfg.tokenizer else None
            identity = {"provider": "openai", "base_url": cfg.base_url, "model": cfg.model}
            models.append(ResolvedModel(cfg.label, role, identity, None, tokenizer))
            continue
        try:
            name, identity, parent = _local_model(cfg, store)
        except (StoreError, FileNotFoundError) as exc:
            if cfg.optional:
                skipped.append(f"{cfg.label} ({cfg.model}): not available ({exc})")
                continue
            raise EvaluationInputError(f"evaluate.models {cfg.label!r}: {exc}") from None
        role = RoleConfig(provider="local", model=name, batch_size=cfg.batch_size,
                          dtype=cfg.dtype, device=cfg.device, **common)
        identity |= {"dtype": cfg.dtype}
        models.append(ResolvedModel(cfg.label, role, identity, parent,
                                    resolve_model_path(name)))
    return models, skipped


# --------------------------------------------------------------------------- answers


@dataclass
class Answers:
    suite: str
    model: str
    samples: list[BenchSample]
    manifest: Manifest
    reused: bool
    failures: int


def prediction_params(config: RunConfig, model: ResolvedModel) -> dict[str, Any]:
    cfg = config.evaluate
    decoding = cfg.model_dump(include={"temperature", "top_p", "top_k", "max_tokens"})
    return {"model": model.identity, "decoding": {**decoding, "seed": config.seed},
            "max_prompt_tokens": cfg.max_prompt_tokens}


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
                        on_progress: Callable[[str, int, int], Awaitable[None]] | None = None,
                        ) -> list[Answers]:
    """The model's answers to every prompt of each suite. Published answers are reused; the
    model is loaded once for the suites still to answer."""
    answers = {s.name: existing_answers(config, store, s, model) for s in suites}
    todo = [s for s in suites if answers[s.name] is None]
    if todo:
        llm = LLMConfig(student=model.role, cache=config.llm.cache,
                        cache_dir=config.llm.cache_dir, budget=config.llm.budget)
        cutter = PromptCutter.for_model(config.evaluate.max_prompt_tokens, model.tokenizer)
        async with LLMGateway(llm) as gateway:
            for suite in todo:
                stage = f"{STAGE}:{suite.name}"

                async def progress(done: int, total: int, name: str = suite.name) -> None:
                    if on_progress is not None:
                        await on_progress(name, done, total)

                run = await predict_benchmark(suite.samples, gateway, stage=stage,
                                              settings=config.evaluate, seed=config.seed,
                                              cutter=cutter, on_progress=progress)
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


# --------------------------------------------------------------------------- report


@dataclass
class EvaluationReport:
    manifest: Manifest
    report: ComparisonReport
    human: dict[str, dict[str, Any]] = field(default_factory=dict)


def scoring_options(config: EvaluateConfig) -> ScoringOptions:
    return ScoringOptions(parser=config.parser, quirks=config.quirks, tokenizer=config.tokenizer)


def score_answers(config: EvaluateConfig, suites: Sequence[Suite],
                  answers: Sequence[Answers]) -> list[ModelScores]:
    golden = {s.name: s.samples for s in suites}
    scores = []
    for entry in answers:
        result = score_samples(golden[entry.suite], entry.samples, scoring_options(config),
                               f"{entry.manifest.ref}/{PREDICTIONS_FILE}")
        scores.append(ModelScores(entry.suite, entry.model, result,
                                  tool_use_values(result, config.success_rouge),
                                  entry.failures))
    return scores


def closed_loop_rows(rollouts: Sequence[RolloutRun]) -> list[dict[str, Any]]:
    """The closed-loop rates in the report's long format (suite ``closed_loop:FORM``)."""
    rows = []
    for form in dict.fromkeys(r.form for r in rollouts):
        scores = ClosedLoopScores([row for r in rollouts if r.form == form for row in r.rows])
        for entry in scores.table():
            for metric in ("pass@1", "pass^k", "reward"):
                rows.append({"suite": f"closed_loop:{form}", "model": entry["model"],
                             "view": entry["by"], "group": entry["value"], "metric": metric,
                             "value": entry[metric], "std": None, "n": entry["cases"],
                             "partial": False})
    return rows


def build_report(config: RunConfig, store: ArtifactStore, suites: Sequence[Suite],
                 answers: Sequence[Answers], skipped: Sequence[str],
                 rollouts: Sequence[RolloutRun] = (), bfcl: Sequence[BfclRun] = (),
                 retrieval: RetrievalEvaluation | None = None) -> EvaluationReport:
    cfg = config.evaluate
    if retrieval is not None:
        skipped = [*skipped, *retrieval.skipped]
    scores = score_answers(cfg, suites, answers)
    by_suite: dict[str, dict[str, list[BenchSample]]] = {}
    for entry in answers:
        by_suite.setdefault(entry.suite, {})[entry.model] = entry.samples
    items = review_items(by_suite)
    human = {}
    if cfg.human_eval.filled_sheet:
        human = usable_rates(read_reviews(cfg.human_eval.filled_sheet, items))
    report = comparison(scores, human=human, skipped=skipped, title=STAGE)
    loop_rows = [row for r in rollouts for row in r.rows]
    if rollouts:
        report.rows += closed_loop_rows(rollouts)
        report.markdown += "\n\n" + "\n\n".join(
            closed_loop_markdown(ClosedLoopScores([row for r in rollouts if r.form == form
                                                   for row in r.rows]), form)
            for form in dict.fromkeys(r.form for r in rollouts))
    if bfcl:
        report.rows += bfcl_rows(bfcl)
        report.markdown += "\n\n" + bfcl_markdown(bfcl)
    if retrieval is not None and retrieval.scores.rows:
        report.rows += retrieval.report_rows()
        report.markdown += "\n\n" + retrieval.markdown()
    parents = ([s.ref for s in suites] + [a.manifest.ref for a in answers]
               + [r.manifest.ref for r in rollouts] + [b.manifest.ref for b in bfcl]
               + (retrieval.parents if retrieval else []))
    params = {
        "scoring": scoring_options(cfg).__dict__, "success_rouge": cfg.success_rouge,
        "labels": {str(a.manifest.ref): a.model for a in answers}, "skipped": list(skipped),
        "human_sample_size": cfg.human_eval.sample_size, "seed": config.seed,
        "retrieval": retrieval.params if retrieval else None,
        "filled_sheet_sha256": (file_fingerprint(cfg.human_eval.filled_sheet)
                                if cfg.human_eval.filled_sheet else None),
    }
    with tempfile.TemporaryDirectory(prefix="agentune-eval-") as tmp:
        folder = Path(tmp)
        (folder / "report.md").write_text(report.markdown + "\n", encoding="utf-8")
        files = {"report.md": folder / "report.md"}
        if scores:
            files["comparison.png"] = plot_comparison(report, folder / "comparison.png", STAGE)
        if loop_rows:
            files["closed_loop.png"] = plot_closed_loop(
                loop_rows, folder / "closed_loop.png",
                f"{STAGE}: closed-loop pass@1 per scenario kind")
        if cfg.human_eval.sample_size:
            sheet = review_sheet(items, cfg.human_eval.sample_size, config.seed)
            written = write_review_sheet(sheet, folder / "review")
            files |= {f"review/{name}": path for name, path in written.items()}
        manifest = store.publish(
            REPORT_ARTIFACT, report.rows, parents=parents, params=params,
            stats={"summary": report.summary, "human": human, "skipped": list(skipped),
                   "closed_loop": closed_loop_summary(loop_rows),
                   "bfcl": bfcl_summary(bfcl),
                   "retrieval": ({"rows": retrieval.scores.rows,
                                  "misses": retrieval.scores.misses} if retrieval else None)},
            files=files,
            description="evaluation: KAgentBench scores and tool-use metrics per model, "
            "template source and language; report.md, comparison.png, review sheet")
    return EvaluationReport(manifest, report, human)
