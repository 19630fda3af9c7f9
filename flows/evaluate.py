"""Stage 6: benchmarks answered by every listed model (base, tuned ...), scored as KAgentBench
scores plus the tool-use metrics; `eval_benchmark`, `eval_predictions` and `eval_report` out."""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.benchmark import Benchmark, BenchmarkRun
from agentune.tasks.evaluate.models import ResolvedModel, resolve_models
from agentune.tasks.evaluate.registry import BENCHMARKS
from agentune.tasks.evaluate.stage import REPORT_ARTIFACT, EvaluationReport, build_report
from agentune.tasks.llm.local_models import share_models
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import stage_result
from agentune.tasks.runtime import open_runtime
from agentune.tasks.store.artifact_store import ArtifactStore


@task(name="prepare benchmarks", cache_policy=NO_CACHE)
async def prepare_task(config: RunConfig, store: ArtifactStore) -> list[Any]:
    return [await asyncio.to_thread(b.prepare, config, store) for b in BENCHMARKS]


@task(name="benchmark", task_run_name="{benchmark.name}", cache_policy=NO_CACHE)
async def benchmark_task(config: RunConfig, store: ArtifactStore,
                         benchmark: Benchmark[Any, Any], plan: Any,
                         models: list[ResolvedModel]) -> BenchmarkRun[Any]:
    return await benchmark.run(config, store, plan, models, get_run_logger())


@task(name="score and report", cache_policy=NO_CACHE)
async def report_task(config: RunConfig, store: ArtifactStore, runs: list[BenchmarkRun[Any]],
                      skipped: list[str]) -> EvaluationReport:
    return await asyncio.to_thread(build_report, config, store, runs, skipped)


@flow(name="evaluate", description="Benchmarks (held-out test split, KAgentBench) answered by "
      "every listed model, scored exactly as KAgentBench plus tool-use metrics; base vs tuned "
      "report out.")
async def evaluate(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        plans = await prepare_task(config, store)
        models, skipped = resolve_models(config.evaluate, store, engine=config.llm.local_engine)
        # One benchmark at a time, in report order. Their gateways ask the models the runtime's
        # gateway holds: each model is loaded once in the run and freed when the runtime closes.
        with share_models(runtime.gateway.models):
            runs = [await benchmark_task(config, store, benchmark, plan, models)
                    for benchmark, plan in zip(BENCHMARKS, plans, strict=True)]
        evaluation = await report_task(config, store, runs, skipped)
        reporting.table(f"{STAGE}-comparison", evaluation.rows, "every score per suite, model, "
                        "template source and language")
        reporting.markdown(f"{STAGE}-report", evaluation.markdown, "base vs tuned comparison")
        for key, rows, description in evaluation.tables:
            reporting.table(f"{STAGE}-{key}", rows, description)
        manifests = {**{name: v.manifest for run in runs for name, v in run.versions.items()},
                     REPORT_ARTIFACT: evaluation.manifest}
        result = stage_result(STAGE, manifests, reused=all(run.reused for run in runs),
                              summary=evaluation.summary,
                              usage=[row for run in runs for row in run.usage], store=store)
        return {**result, "comparison": evaluation.markdown}
