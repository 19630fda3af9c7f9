"""Stage 1: seed queries + tool catalog -> cleaned, grouped, expanded `queries`, `tools`, `rejects`."""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.collect_queries import STAGE
from agentune.tasks.collect_queries.stage import (
    QueryCollection,
    build_query_collection,
    collection_params,
)
from agentune.tasks.collect_queries.tool_subsets import tool_selector
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.orchestration.stage_outputs import (
    Output,
    publish_outputs,
    reused_result,
    stage_result,
)
from agentune.tasks.runtime import Runtime, open_runtime
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval, candidate_retrieval

OUTPUTS = ("queries", "tools", "rejects")


@task(name="build query collection", cache_policy=NO_CACHE)
async def build(runtime: Runtime, retrieval: CandidateRetrieval) -> QueryCollection:
    config = runtime.config
    return await build_query_collection(config.queries, config.environments.catalog,
                                        seed=config.seed, gateway=runtime.gateway,
                                        selector=tool_selector(config.runner),
                                        retrieval=retrieval)


@flow(name="collect_queries", description="Seed queries and a tool catalog in; cleaned, "
      "deduplicated, grouped and expanded query sets with candidate tools out.")
async def collect_queries(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        params = collection_params(config)
        retrieval, retriever = candidate_retrieval(store, config.queries.retriever)
        parents = [retriever] if retriever else []
        reused = reused_result(STAGE, store, OUTPUTS, parents=parents, params=params)
        if reused is not None:
            return reused
        result = await build(runtime, retrieval)
        manifests = publish_outputs(store, {
            "queries": Output(result.query_rows(), QUERY_FEATURES,
                              {"summary": result.summary, "sets": len(result.sets)},
                              "cleaned, deduplicated queries in similar-query sets"),
            "tools": Output(result.tool_rows(), TOOL_FEATURES, {"tools": len(result.tools)},
                            "the validated tool catalog"),
            "rejects": Output(result.reject_rows(), REJECT_FEATURES,
                              {"rejects": len(result.rejects)},
                              "every query dropped by collect_queries, with the reason"),
        }, parents=parents, params=params)
        return stage_result(STAGE, manifests, reused=False, summary=result.summary,
                            usage=runtime.gateway.usage_rows(), store=store)
