"""The whole MAT pipeline: every stage flow in order, each publishing versions the next reads."""

from __future__ import annotations

from typing import Any

from prefect import Flow, flow

from agentune.config import RunConfig

# Stage name -> flow, in pipeline order. Stage flows take the run config and return
# {"stage", "outputs": {artifact: "name@version"}, "summary": {...}}.
STAGES: dict[str, Flow[..., dict[str, Any]]] = {}


@flow(name="pipeline", description="Run every agentune stage in order on one run config.")
def pipeline(config: RunConfig) -> dict[str, Any]:
    return {name: stage(config=config) for name, stage in STAGES.items()}
