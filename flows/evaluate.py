"""Stage 6: benchmarks answered by every listed model (base, tuned ...), scored as KAgentBench
scores plus the tool-use metrics; `eval_benchmark`, `eval_predictions` and `eval_report` out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog, configured_environments
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.bfcl.run import BfclRun, BfclSuite, bfcl_suite, run_bfcl_model
from agentune.tasks.evaluate.bfcl.worker import BfclUnavailable, bfcl_python
from agentune.tasks.evaluate.closed_loop import (
    ClosedLoopInputs,
    RolloutRun,
    closed_loop_inputs,
    forms,
    native_role,
    run_model,
    trained_form,
)
from agentune.tasks.evaluate.retrieval import RetrievalEvaluation, evaluate_retrieval
from agentune.tasks.evaluate.stage import (
    REPORT_ARTIFACT,
    Answers,
    EvaluationReport,
    ResolvedModel,
    Suite,
    answer_suites,
    build_report,
    prepare_suites,
    resolve_models,
)
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore


@task(name="prepare benchmarks", cache_policy=NO_CACHE)
async def suites_task(config: RunConfig, store: ArtifactStore) -> list[Suite]:
    return await asyncio.to_thread(prepare_suites, config, store)


@task(name="answer benchmarks", task_run_name="answer with {model.label}",
      cache_policy=NO_CACHE)
async def answer_task(config: RunConfig, store: ArtifactStore, suites: list[Suite],
                      model: ResolvedModel) -> list[Answers]:
    logger = get_run_logger()
    started: dict[str, float] = {}
    tenths: dict[str, int] = {}

    async def on_progress(suite: str, done: int, total: int) -> None:
        if done == 0:
            started[suite] = time.perf_counter()
            logger.info("%s on %s: %d prompts to answer", model.label, suite, total)
            return
        tenth = done * 10 // total
        if tenth > tenths.get(suite, 0):  # a line per tenth of the prompts
            tenths[suite] = tenth
            rate = done / max(time.perf_counter() - started[suite], 1e-9)
            logger.info("%s on %s: %d/%d prompts answered (%.2f/s)", model.label, suite, done,
                        total, rate)

    return await answer_suites(config, store, suites, model, on_progress)


@task(name="closed loop", task_run_name="closed loop: {model.label}, {form} form",
      cache_policy=NO_CACHE)
async def closed_loop_task(config: RunConfig, store: ArtifactStore, inputs: ClosedLoopInputs,
                           catalog: EnvironmentCatalog, model: ResolvedModel,
                           form: str) -> RolloutRun:
    logger = get_run_logger()
    loop = config.evaluate.closed_loop
    role, identity = model.role, dict(model.identity)
    if form == "messages" and model.tokenizer is not None:
        role = native_role(role, loop, model.tokenizer, config.llm.cache_dir)
        identity["chat_template"] = Path(role.chat_template).name if role.chat_template else None
    tenths = [0]

    async def progress(done: int, total: int) -> None:
        if done == 0:
            logger.info("%s, %s form: %d trials (%d scenarios x %d groups x %d)", model.label,
                        form, total, len(inputs.records), len(inputs.groups), loop.trials)
        elif done * 10 // total > tenths[0]:
            tenths[0] = done * 10 // total
            logger.info("%s, %s form: %d/%d trials done", model.label, form, done, total)

    return await run_model(config, store, label=model.label, role=role, identity=identity,
                           parent=model.parent, form=form, inputs=inputs, catalog=catalog,
                           on_progress=progress)


@task(name="bfcl", task_run_name="bfcl: {model.label}", cache_policy=NO_CACHE)
async def bfcl_task(config: RunConfig, store: ArtifactStore, suite: BfclSuite,
                    model: ResolvedModel, python: Path) -> BfclRun:
    logger = get_run_logger()
    role, identity = model.role, dict(model.identity)
    if suite.mode == "fc" and model.tokenizer is not None:
        role = native_role(role, config.evaluate.closed_loop, model.tokenizer,
                           config.llm.cache_dir)
        identity["chat_template"] = Path(role.chat_template).name if role.chat_template else None
    tenths = [0]

    async def progress(done: int, total: int) -> None:
        if done == 0:
            logger.info("%s on BFCL: %d entries", model.label, total)
        elif done * 10 // total > tenths[0]:
            tenths[0] = done * 10 // total
            logger.info("%s on BFCL: %d/%d entries answered", model.label, done, total)

    return await run_bfcl_model(config, store, label=model.label, role=role, identity=identity,
                                parent=model.parent, suite=suite, python=python,
                                on_progress=progress)


async def bfcl_runs(config: RunConfig, store: ArtifactStore, models: list[ResolvedModel],
                    skipped: list[str]) -> list[BfclRun]:
    """Every model on the same BFCL subset; nothing when BFCL is off, and a note in ``skipped``
    (not a failed flow) when bfcl-eval's venv is missing or its scorer fails."""
    if not config.evaluate.bfcl.enabled:
        return []
    try:
        python = bfcl_python(config.evaluate.bfcl.python)
        suite = await asyncio.to_thread(bfcl_suite, config, python)
    except BfclUnavailable as exc:
        skipped.append(f"BFCL: {exc}")
        return []
    runs = []
    for model in models:
        try:
            runs.append(await bfcl_task(config, store, suite, model, python))
        except BfclUnavailable as exc:
            skipped.append(f"BFCL, {model.label}: {exc}")
    return runs


@task(name="tool retrieval", cache_policy=NO_CACHE)
async def retrieval_task(config: RunConfig, store: ArtifactStore) -> RetrievalEvaluation | None:
    return await asyncio.to_thread(evaluate_retrieval, config, store)


@task(name="score and report", cache_policy=NO_CACHE)
async def report_task(config: RunConfig, store: ArtifactStore, suites: list[Suite],
                      answers: list[Answers], skipped: list[str],
                      rollouts: list[RolloutRun], bfcl: list[BfclRun],
                      retrieval: RetrievalEvaluation | None) -> EvaluationReport:
    return await asyncio.to_thread(build_report, config, store, suites, answers, skipped,
                                   rollouts, bfcl, retrieval)


async def closed_loop_runs(config: RunConfig, store: ArtifactStore,
                           models: list[ResolvedModel], skipped: list[str]) -> list[RolloutRun]:
    """Every model in every form asked for, on the same cases; nothing when closed loop is off
    or no scenarios were published (a note in ``skipped`` says so)."""
    loop = config.evaluate.closed_loop
    if not loop.enabled:
        return []
    inputs = await asyncio.to_thread(closed_loop_inputs, config, store)
    if inputs is None or not inputs.records:
        skipped.append("closed loop: no scenarios of the splits "
                       f"{', '.join(loop.splits)} (run build_scenarios first)")
        return []
    catalog = configured_environments(config.environments)
    trained = [f for f in (trained_form(store, m.parent) for m in models) if f]
    runs = []
    for form in forms(loop, trained):
        for model in models:
            runs.append(await closed_loop_task(config, store, inputs, catalog, model, form))
    return runs


@flow(name="evaluate", description="Benchmarks (held-out test split, KAgentBench) answered by "
      "every listed model, scored exactly as KAgentBench plus tool-use metrics; base vs tuned "
      "report out.")
async def evaluate(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        suites = await suites_task(config, store)
        models, skipped = resolve_models(config.evaluate, store)
        answers = []
        # One model at a time: each loads its weights (local) once and batches its prompts.
        for model in models:
            answers += await answer_task(config, store, suites, model)
        rollouts = await closed_loop_runs(config, store, models, skipped)
        bfcl = await bfcl_runs(config, store, models, skipped)
        retrieval = await retrieval_task(config, store)
        evaluation = await report_task(config, store, suites, answers, skipped, rollouts, bfcl,
                                       retrieval)
        report = evaluation.report
        reporting.table(f"{STAGE}-comparison", report.rows, "every score per suite, model, "
                        "template source and language")
        reporting.markdown(f"{STAGE}-report", report.markdown, "base vs tuned comparison")
        manifests = {**{f"eval_benchmark:{s.name}": s.manifest for s in suites},
                     **{f"eval_predictions:{a.suite}:{a.model}": a.manifest for a in answers},
                     **{f"eval_rollouts:{r.form}:{r.model}": r.manifest for r in rollouts},
                     **{f"eval_bfcl:{b.model}": b.manifest for b in bfcl},
                     REPORT_ARTIFACT: evaluation.manifest}
        reused = (all(s.reused for s in suites) and all(a.reused for a in answers)
                  and all(r.reused for r in rollouts) and all(b.reused for b in bfcl))
        usage = [row for a in answers if not a.reused for row in a.manifest.stats["usage"]]
        loop_summary = evaluation.manifest.stats.get("closed_loop") or []
        if loop_summary:
            reporting.table(f"{STAGE}-closed-loop", loop_summary,
                            "closed loop: pass@1, pass^k and reward per model and split")
        bfcl_table = evaluation.manifest.stats.get("bfcl") or []
        if bfcl_table:
            reporting.table(f"{STAGE}-bfcl", bfcl_table,
                            "BFCL accuracy per model and category (bfcl-eval's own scorer)")
        result = stage_result(STAGE, manifests, reused=reused,
                              summary=[*report.summary, *loop_summary, *bfcl_table],
                              usage=usage, store=store)
        return {**result, "comparison": report.markdown}
