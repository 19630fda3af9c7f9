"""Stage 1b: the tool catalog's environments + a scenario seed file + query sets -> scenarios with
executed ground truth (`scenarios`) and `rejects`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from agentune.config import RunConfig
from agentune.tasks.build_scenarios import STAGE
from agentune.tasks.build_scenarios.counts import count_rows, plot_counts
from agentune.tasks.build_scenarios.stage import (
    ScenarioSet,
    build_scenario_set,
    read_query_rows,
    scenario_params,
)
from agentune.tasks.common.rejects import REJECT_FEATURES
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.catalog import EnvironmentCatalog, configured_environments
from agentune.tasks.environments.replay import open_episodes
from agentune.tasks.orchestration import reporting
from agentune.tasks.orchestration.stage_outputs import (
    Output,
    publish_outputs,
    reused_result,
    stage_result,
)
from agentune.tasks.runtime import Runtime, open_runtime
from agentune.tasks.verifier import VERSION as VERIFIER_VERSION

OUTPUTS = ("scenarios", "rejects")


@task(name="build scenarios", cache_policy=NO_CACHE)
async def build(runtime: Runtime, catalog: EnvironmentCatalog,
                query_rows: list[dict[str, Any]]) -> ScenarioSet:
    config = runtime.config
    tools = config.environments.tools
    async with open_episodes(catalog, tools, gateway=runtime.gateway,
                             now=config.scenarios.current_time, stage=STAGE) as episode:
        return await build_scenario_set(config.scenarios, catalog, query_rows, episode=episode,
                                        gateway=runtime.gateway, seed=config.seed)


@flow(name="build_scenarios", description="The tool catalog's environments, a scenario seed "
      "file and the query sets in; scenarios (request, starting state, ground-truth calls, "
      "facts) whose ground truth ran in a fresh environment out, failures rejected.")
async def build_scenarios(config: RunConfig) -> dict[str, Any]:
    async with open_runtime(config) as runtime:
        store = runtime.store
        catalog = configured_environments(config.environments)
        parents = [store.resolve(config.scenarios.queries)]
        params = scenario_params(config, catalog)
        reused = reused_result(STAGE, store, OUTPUTS, parents=parents, params=params)
        if reused is not None:
            return reused
        query_rows = read_query_rows(store, parents[0])
        result = await build(runtime, catalog, query_rows)
        stats: dict[str, Any] = {"summary": result.summary, "verifier": VERIFIER_VERSION,
                                 "unbound_tools": catalog.unbound_tools()}
        with tempfile.TemporaryDirectory(prefix="agentune-scenarios-") as tmp:
            files = None
            if config.scenarios.generate.enabled:  # the counts table and PNG
                stats["counts"] = count_rows(result.rows)
                files = {"counts.png": plot_counts(result.rows, Path(tmp) / "counts.png",
                                                   "scenarios by environment/language and kind")}
            manifests = {"scenarios": store.publish(
                "scenarios", result.rows, parents=parents, params=params, stats=stats,
                features=SCENARIO_FEATURES, files=files,
                description="scenarios with executed ground truth: request, environment, "
                "starting and expected state, calls, facts, split")}
        if "counts" in stats:
            reporting.table(f"{STAGE}-counts", stats["counts"], "scenarios by environment x "
                            "kind x language x split")
        manifests |= publish_outputs(store, {
            "rejects": Output(result.reject_rows(), REJECT_FEATURES,
                              {"rejects": len(result.rejects)},
                              "every scenario dropped by build_scenarios, with the reason"),
        }, parents=parents, params=params)
        return stage_result(STAGE, manifests, reused=False, summary=result.summary,
                            usage=runtime.gateway.usage_rows(), store=store)
