"""The whole MAT pipeline: every stage flow in order, each publishing versions the next reads."""

from __future__ import annotations

from typing import Any

from prefect import Flow, flow

from agentune.config import RunConfig
from agentune.flows.build_dataset import build_dataset
from agentune.flows.build_scenarios import build_scenarios
from agentune.flows.build_templates import build_templates
from agentune.flows.collect_queries import collect_queries
from agentune.flows.evaluate import evaluate
from agentune.flows.synthesize import synthesize
from agentune.flows.train import train
from agentune.flows.train_retriever import train_retriever
from agentune.tasks.orchestration.failures import stage_failure
from agentune.tasks.runtime import open_runtime

# Stage name -> flow, in pipeline order. Stage flows take the run config and return
# {"stage", "outputs": {artifact: "name@version"}, "reused", "summary"}.
STAGES: dict[str, Flow[..., Any]] = {
    "collect_queries": collect_queries,
    "build_scenarios": build_scenarios,
    "build_templates": build_templates,
    "synthesize": synthesize,
    "build_dataset": build_dataset,
    "train": train,
    "train_retriever": train_retriever,
    "evaluate": evaluate,
}


@flow(name="pipeline", description="Run every agentune stage in order on one run config.")
async def pipeline(config: RunConfig) -> dict[str, Any]:
    # One runtime for the whole run: the stages share its gateway (budget, limits, local model).
    async with open_runtime(config):
        done: dict[str, Any] = {}
        for name, stage in STAGES.items():
            try:
                done[name] = await stage(config=config)
            except Exception as exc:  # BudgetExceeded included: the message says where it hit
                raise stage_failure(config, name, done, exc) from exc
        return done
