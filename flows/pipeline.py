"""The whole MAT pipeline: every stage flow in order, each publishing versions the next reads."""

from __future__ import annotations

from typing import Any

from prefect import Flow, flow

from agentune.config import RunConfig
from agentune.flows.collect_queries import collect_queries
from agentune.tasks.runtime import open_runtime

# Stage name -> flow, in pipeline order. Stage flows take the run config and return
# {"stage", "outputs": {artifact: "name@version"}, "reused", "summary"}.
STAGES: dict[str, Flow[..., Any]] = {
    "collect_queries": collect_queries,
}


@flow(name="pipeline", description="Run every agentune stage in order on one run config.")
async def pipeline(config: RunConfig) -> dict[str, Any]:
    # One runtime for the whole run: the stages share its gateway (budget, limits, local model).
    async with open_runtime(config):
        return {name: await stage(config=config) for name, stage in STAGES.items()}
