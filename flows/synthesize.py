"""Stage 3: queries x tools x kept templates -> multi-step tool-use `trajectories` (messages + tools
and per-step prompt/completion pairs) and `rejects`, resumable from per-trajectory checkpoints."""

from __future__ import annotations

import shutil
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import TRAJECTORY_FEATURES
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import (
    Output,
    publish_outputs,
    reused_result,
    stage_result,
)
from agentune.tasks.runtime import Runtime, open_runtime
from agentune.tasks.store.artifact_store import VersionRef
from agentune.tasks.synthesize import STAGE
from agentune.tasks.synthesize.agent_loop import LoopSettings
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.sampling import (
    Combination,
    SynthesisInputs,
    plan_summary,
    read_catalog,
    read_queries,
    read_templates,
    sample_combinations,
)
from agentune.tasks.synthesize.stage import (
    SynthesisResult,
    assemble_synthesis,
    checkpoint_dir,
    synthesis_params,
    synthesize_trajectories,
)

OUTPUTS = ("trajectories", "rejects")


def read_inputs(runtime: Runtime, parents: list[VersionRef]) -> SynthesisInputs:
    store = runtime.store
    queries_ref, catalog_ref, templates_ref = parents
    tools = read_catalog(store.read(catalog_ref), str(catalog_ref))
    return SynthesisInputs(queries=read_queries(store.read(queries_ref), str(queries_ref), tools),
                           tools=tools,
                           templates=read_templates(store.read(templates_ref), str(templates_ref)))


# No task caching: the inputs hold the runtime (gateway, sqlite cache), which cannot be hashed;
# the stage reuses published versions and resumes from checkpoints instead.
@task(name="sample combinations", cache_policy=NO_CACHE)
def sample(runtime: Runtime, inputs: SynthesisInputs) -> list[Combination]:
    plan = sample_combinations(inputs, runtime.config.synthesis, seed=runtime.config.seed)
    counts = plan_summary(plan)
    reporting.table(f"{STAGE}-plan", [{"task type": t, "combinations": n}
                                      for t, n in sorted(counts["by_task_type"].items())],
                    f"{STAGE}: combinations planned per task type")
    return plan


@task(name="synthesize trajectories", cache_policy=NO_CACHE)
async def synthesize_all(runtime: Runtime, inputs: SynthesisInputs, plan: list[Combination],
                         version: str) -> SynthesisResult:
    config = runtime.config
    cfg = config.synthesis
    records = await synthesize_trajectories(
        plan, inputs.templates, inputs.tools, gateway=runtime.gateway, tools_config=cfg.tools,
        settings=LoopSettings.from_config(cfg, seed=config.seed),
        checkpoint=SynthesisCheckpoint(checkpoint_dir(cfg.work_dir, version)),
        concurrency=cfg.concurrency, teacher_model=config.llm.teacher.model)
    return assemble_synthesis(plan, records)


@flow(name="synthesize", description="Queries x tools x kept templates in; multi-step tool-use "
      "trajectories answered by the teacher, executed against real and simulated tools, gated, "
      "in OpenAI messages and per-step template form out.")
async def synthesize(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store, cfg = runtime.store, config.synthesis
        parents = [store.resolve(cfg.queries), store.resolve(cfg.catalog),
                   store.resolve(cfg.templates)]
        params = synthesis_params(config)
        reused = reused_result(STAGE, store, OUTPUTS, parents=parents,
                               params=params)
        if reused is not None:
            return reused
        inputs = read_inputs(runtime, parents)
        plan = sample(runtime, inputs)
        version = store.version_id("trajectories", parents=parents, params=params)
        result = await synthesize_all(runtime, inputs, plan, version)
        manifests = publish_outputs(store, {
            "trajectories": Output(result.rows, TRAJECTORY_FEATURES,
                                   {"summary": result.summary, **result.stats},
                                   "multi-step tool-use trajectories: OpenAI messages + tools, "
                                   "and each step as a prompt/completion pair in its template's "
                                   "format"),
            "rejects": Output(result.rejects, REJECT_FEATURES, {"rejects": len(result.rejects)},
                              "every trajectory and step answer dropped by synthesize, with the "
                              "reason"),
        }, parents=parents, params=params)
        if not cfg.keep_checkpoints:
            shutil.rmtree(checkpoint_dir(cfg.work_dir, version), ignore_errors=True)
        return stage_result(STAGE, manifests, reused=False, summary=result.summary,
                            usage=runtime.gateway.usage_rows(), store=store)
