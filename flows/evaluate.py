"""Stage 6: benchmarks answered by every listed model (base, tuned ...), scored as KAgentBench
scores plus the tool-use metrics; `eval_benchmark`, `eval_predictions` and `eval_report` out."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.evaluate import STAGE
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


@task(name="score and report", cache_policy=NO_CACHE)
async def report_task(config: RunConfig, store: ArtifactStore, suites: list[Suite],
                      answers: list[Answers], skipped: list[str]) -> EvaluationReport:
    return await asyncio.to_thread(build_report, config, store, suites, answers, skipped)


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
        evaluation = await report_task(config, store, suites, answers, skipped)
        report = evaluation.report
        reporting.table(f"{STAGE}-comparison", report.rows, "every score per suite, model, "
                        "template source and language")
        reporting.markdown(f"{STAGE}-report", report.markdown, "base vs tuned comparison")
        manifests = {**{f"eval_benchmark:{s.name}": s.manifest for s in suites},
                     **{f"eval_predictions:{a.suite}:{a.model}": a.manifest for a in answers},
                     REPORT_ARTIFACT: evaluation.manifest}
        reused = all(s.reused for s in suites) and all(a.reused for a in answers)
        usage = [row for a in answers if not a.reused for row in a.manifest.stats["usage"]]
        result = stage_result(STAGE, manifests, reused=reused, summary=report.summary,
                              usage=usage, store=store)
        return {**result, "comparison": report.markdown}
