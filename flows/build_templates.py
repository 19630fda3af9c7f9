"""Stage 2: query sets -> Meta-Agent candidate templates -> structural filter -> judged against the
benchmark templates -> `templates`, `judgements` (with a histogram of score deltas), `rejects`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.build_templates import STAGE
from agentune.tasks.build_templates.judging import (
    InstanceJudgement,
    JudgingFailure,
    plot_delta_histogram,
)
from agentune.tasks.build_templates.meta_agent import (
    CandidateBrief,
    plan_candidates,
    set_views,
)
from agentune.tasks.build_templates.stage import (
    TEMPLATE_FEATURES,
    FilteredCandidates,
    TemplateCollection,
    WrittenCandidates,
    assemble_collection,
    filter_candidates,
    judge_candidates,
    read_stored_inputs,
    select_sets,
    template_params,
    write_candidates,
)
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import JUDGEMENT_FEATURES
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import (
    Output,
    publish_outputs,
    reused_result,
    stage_result,
)
from agentune.tasks.runtime import Runtime, open_runtime
from agentune.tasks.store.artifact_store import VersionRef

OUTPUTS = ("templates", "judgements", "rejects")
HISTOGRAM = "score_deltas.png"


# The tasks take the run's runtime (gateway, store), which Prefect cannot hash; resuming is the
# gateway's response cache's job, so Prefect's own task cache stays off.
@task(name="write candidates", cache_policy=NO_CACHE)
async def write(runtime: Runtime, briefs: list[CandidateBrief]) -> WrittenCandidates:
    return await write_candidates(runtime.gateway, briefs, runtime.config.templates,
                                  seed=runtime.config.seed)


@task(name="structural filter", cache_policy=NO_CACHE)
def structural_filter(runtime: Runtime, written: WrittenCandidates) -> FilteredCandidates:
    return filter_candidates(written.drafts, runtime.config.templates)


@task(name="judge candidates", cache_policy=NO_CACHE)
async def judge(runtime: Runtime, filtered: FilteredCandidates, rows: list[dict[str, Any]],
                tools: dict[str, dict[str, Any]]) -> list[InstanceJudgement | JudgingFailure]:
    return await judge_candidates(runtime.gateway, filtered.kept, rows, tools,
                                  runtime.config.templates, seed=runtime.config.seed)


def publish(runtime: Runtime, result: TemplateCollection, parents: list[VersionRef],
            params: dict[str, Any]) -> dict[str, Any]:
    store, cfg = runtime.store, runtime.config.templates
    with tempfile.TemporaryDirectory(prefix="agentune-templates-") as tmp:
        chart = plot_delta_histogram(result.deltas, cfg.epsilon, Path(tmp) / HISTOGRAM)
        judgements = store.publish(
            "judgements", result.judgement_rows, parents=parents, params=params,
            stats={"instances": len(result.deltas), "epsilon": cfg.epsilon},
            features=JUDGEMENT_FEATURES, files={HISTOGRAM: chart},
            description="judged prompt pairs, one row per pair and order; "
                        f"__files__/{HISTOGRAM}: histogram of score deltas")
    manifests = publish_outputs(store, {
        "templates": Output(result.template_rows, TEMPLATE_FEATURES,
                            {"summary": result.summary,
                             "kept": sum(1 for r in result.template_rows if r["kept"])},
                            "agent prompt templates: benchmarks and Meta-Agent candidates, "
                            "kept or dropped with the reason"),
        "rejects": Output(result.reject_rows(), REJECT_FEATURES, {"rejects": len(result.rejects)},
                          "every candidate and judged instance dropped by build_templates"),
    }, parents=parents, params=params)
    return {"templates": manifests["templates"], "judgements": judgements,
            "rejects": manifests["rejects"]}


@flow(name="build_templates", description="Query sets in; Meta-Agent prompt templates written, "
      "filtered and judged against the benchmark templates; kept templates out.")
async def build_templates(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store, cfg = runtime.store, config.templates
        parents = [store.resolve(cfg.queries), store.resolve(cfg.tools)]
        params = template_params(config)
        reused = reused_result(STAGE, store, OUTPUTS, parents=parents,
                               params=params)
        if reused is not None:
            return reused
        rows, tools = read_stored_inputs(store, parents[0], parents[1])
        views = select_sets(set_views(rows, tools), cfg.max_sets, config.seed)
        briefs = plan_candidates(views, per_set=cfg.candidates_per_set, protocols=cfg.protocols,
                                 languages=cfg.template_languages, seed=config.seed)
        written = await write(runtime, briefs)
        filtered = structural_filter(runtime, written)
        judged = await judge(runtime, filtered, rows, tools)
        result = assemble_collection(written, filtered, judged, cfg, sets_used=len(views),
                                     reserve=cfg.unseen_templates, seed=config.seed)
        reporting.table(f"{STAGE}-templates", result.template_table(),
                        "build_templates: every template, kept or dropped, with score and reason")
        manifests = publish(runtime, result, parents, params)
        return stage_result(STAGE, manifests, reused=False, summary=result.summary,
                            usage=runtime.gateway.usage_rows(), store=store)
