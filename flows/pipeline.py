"""The whole MAT pipeline: every stage flow in order, each publishing versions the next reads.

``train`` runs SFT; when ``train.method`` is dpo or grpo it runs again with that method from the
SFT model it just published (dpo after ``build_preferences`` has paired the synthesis attempts
and that model's own rollouts); ``evaluate`` then sees the last model.
"""

from __future__ import annotations

from typing import Any

from prefect import Flow, flow

from agentune.config import RunConfig
from agentune.flows.build_dataset import build_dataset
from agentune.flows.build_preferences import build_preferences
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
    "build_preferences": build_preferences,
    "train_retriever": train_retriever,
    "evaluate": evaluate,
}


def pipeline_steps(config: RunConfig) -> list[tuple[str, str, dict[str, Any]]]:
    """(result name, stage, extra flow parameters) in order; ``{sft}`` in a parameter is the
    SFT model version the first train step published."""
    method = config.train.method
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (name, name, {}) for name in ("collect_queries", "build_scenarios", "build_templates",
                                      "synthesize", "build_dataset")]
    steps.append(("train", "train", {"method": "sft"}))
    if method == "dpo":
        steps.append(("build_preferences", "build_preferences", {}))
    if method in ("dpo", "grpo"):
        steps.append((f"train_{method}", "train", {"method": method, "from_model": "{sft}"}))
    steps.append(("train_retriever", "train_retriever", {}))
    steps.append(("evaluate", "evaluate", {}))
    return steps


@flow(name="pipeline", description="Run every agentune stage in order on one run config "
      "(sft, then dpo or grpo from it when train.method says so).")
async def pipeline(config: RunConfig) -> dict[str, Any]:
    # One runtime for the whole run: the stages share its gateway (budget, limits, local model).
    async with open_runtime(config):
        done: dict[str, Any] = {}
        for name, stage, extra in pipeline_steps(config):
            if stage not in STAGES:  # a pipeline narrowed to some stages (tests)
                continue
            if extra.get("from_model") == "{sft}":
                extra = extra | {"from_model": done["train"]["outputs"]["model"]}
            try:
                done[name] = await STAGES[stage](config=config, **extra)
            except Exception as exc:  # BudgetExceeded included: the message says where it hit
                raise stage_failure(config, name, done, exc) from exc
        return done
