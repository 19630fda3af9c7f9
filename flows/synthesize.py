"""Stage 3: scenarios (and, if asked, plain queries) x kept templates -> multi-step tool-use
`trajectories` (messages + tools and per-step prompt/completion pairs; every scenario attempt
acted out in a fresh environment and verified), `attempts` and `rejects`, resumable from
per-attempt checkpoints."""

from __future__ import annotations

import shutil
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import ATTEMPT_FEATURES, TRAJECTORY_FEATURES
from agentune.tasks.environments.catalog import (
    EnvironmentCatalog,
    configured_environments,
)
from agentune.tasks.environments.replay import open_episodes
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import (
    Output,
    publish_outputs,
    reused_result,
    stage_result,
)
from agentune.tasks.runtime import Runtime, open_runtime
from agentune.tasks.synthesize import STAGE
from agentune.tasks.synthesize.agent_loop import Verification
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.native_loop import native_teacher
from agentune.tasks.synthesize.sampling import (
    Combination,
    SynthesisInputs,
    plan_summary,
    plan_synthesis,
)
from agentune.tasks.synthesize.stage import (
    SynthesisResult,
    assemble_synthesis,
    checkpoint_dir,
    read_inputs,
    read_judged_rows,
    resolve_sources,
    synthesis_params,
    synthesize_trajectories,
)
from agentune.tasks.synthesize.trajectory_forms import RowFraming

OUTPUTS = ("trajectories", "attempts", "rejects")


# No task caching: the inputs hold the runtime (gateway, sqlite cache), which cannot be hashed;
# the stage reuses published versions and resumes from checkpoints instead.
@task(name="plan combinations", cache_policy=NO_CACHE)
def sample(runtime: Runtime, inputs: SynthesisInputs) -> list[Combination]:
    plan = plan_synthesis(inputs, runtime.config.synthesis, seed=runtime.config.seed)
    counts = plan_summary(plan)
    reporting.table(f"{STAGE}-plan", [{"kind": k, "combinations": n}
                                      for k, n in sorted(counts["by_kind"].items())],
                    f"{STAGE}: combinations planned per scenario kind (query: plain queries)")
    return plan


@task(name="synthesize trajectories", cache_policy=NO_CACHE)
async def synthesize_all(runtime: Runtime, inputs: SynthesisInputs, plan: list[Combination],
                         catalog: EnvironmentCatalog, version: str,
                         judged_rows: list[dict[str, Any]]) -> SynthesisResult:
    config = runtime.config
    cfg, tools = config.synthesis, config.environments.tools
    async with open_episodes(catalog, tools, gateway=runtime.gateway, now=cfg.current_time,
                             stage=STAGE) as episode:
        verification = Verification({r.scenario.id: r for r in inputs.scenarios}, episode,
                                    config.verifier)
        records = await synthesize_trajectories(
            plan, inputs.templates, inputs.all_tools(), executor=episode.executor,
            gateway=runtime.gateway,
            settings=cfg, seed=config.seed,
            checkpoint=SynthesisCheckpoint(checkpoint_dir(cfg.work_dir, version)),
            concurrency=cfg.concurrency, teacher_model=config.llm.teacher.model,
            attempts=cfg.attempts, stop_at_first_pass=cfg.stop_at_first_pass,
            verification=verification, framing=RowFraming.from_config(cfg))
    return assemble_synthesis(plan, records, attempts=cfg.attempts,
                              stop_at_first_pass=cfg.stop_at_first_pass,
                              pii_action=cfg.pii_action, judged_rows=judged_rows)


@flow(name="synthesize", description="Scenarios (and plain queries) x kept templates in; "
      "multi-step tool-use trajectories acted out by the teacher in fresh environments, every "
      "attempt verified against its scenario's ground truth, in OpenAI messages and per-step "
      "template form out, with every attempt and its reward.")
async def synthesize(config: RunConfig) -> dict[str, Any]:
    # The messages form asks the teacher natively, as the gateway's student role.
    native = native_teacher(config.llm.teacher, config.llm.cache_dir) \
        if config.synthesis.form == "messages" else None
    async with open_runtime(config, student=native) as runtime:
        store, cfg = runtime.store, config.synthesis
        catalog = configured_environments(config.environments)
        sources = resolve_sources(config, store)
        parents = sources.parents
        params = synthesis_params(config, catalog)
        reused = reused_result(STAGE, store, OUTPUTS, parents=parents, params=params)
        if reused is not None:
            return reused
        inputs = read_inputs(store, sources, catalog)
        plan = sample(runtime, inputs)
        version = store.version_id("trajectories", parents=parents, params=params)
        judged_rows = read_judged_rows(store, sources, config.llm.teacher.model)
        result = await synthesize_all(runtime, inputs, plan, catalog, version, judged_rows)
        manifests = publish_outputs(store, {
            "trajectories": Output(result.rows, TRAJECTORY_FEATURES,
                                   {"summary": result.summary, **result.stats},
                                   "multi-step tool-use trajectories: OpenAI messages + tools, "
                                   "and each step as a prompt/completion pair in its template's "
                                   "format; scenario ones verified"),
            "attempts": Output(result.attempts, ATTEMPT_FEATURES,
                               {"attempts": len(result.attempts),
                                "pass_at_k": result.stats["pass_at_k"]},
                               "every verified synthesis attempt, passed or not, with its "
                               "reward and components (preference pairs are made of these)"),
            "rejects": Output(result.rejects, REJECT_FEATURES, {"rejects": len(result.rejects)},
                              "every trajectory and step answer dropped by synthesize, with the "
                              "reason"),
        }, parents=parents, params=params)
        if not cfg.keep_checkpoints:
            shutil.rmtree(checkpoint_dir(cfg.work_dir, version), ignore_errors=True)
        return stage_result(STAGE, manifests, reused=False, summary=result.summary,
                            usage=runtime.gateway.usage_rows(), store=store)
