"""Running calls in a fresh episode: a scenario's ground truth, or a trajectory's calls replayed.

Every call goes through the one tool executor (argument validation, limits, truncation), with
the episode's session in the call's context, so environment tools, built-in implementations and
simulated tools run the way they run during synthesis. The calls of one step are independent and
run concurrently; steps run in order.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from agentune.config.tools import SimulationConfig, ToolsConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.scenarios import (
    Call,
    GroundTruthRun,
    Scenario,
    expects_change,
    generated_paths,
    state_unchanged,
)
from agentune.tasks.environments.session import DEFAULT_NOW, EnvironmentSession
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import Observation, ToolKind
from agentune.tasks.tools.truncation import Tokenizer


def executor_for(catalog: EnvironmentCatalog, config: ToolsConfig, *,
                 gateway: ChatGateway | None = None,
                 tokenizer: Tokenizer | None = None) -> ToolExecutor:
    """The executor of every tool of the environments: environment tools answered by each
    call's session, built-in implementations (the file's and the config's) directly."""
    implementations = dict(config.implementations)
    owned: dict[str, ToolKind] = {}
    for spec in catalog.environments.values():
        implementations.update(spec.implementations)
        if spec.stateful:
            kind: ToolKind = "simulated" if spec.kind == "simulated" else "real"
            owned.update(dict.fromkeys(spec.tool_names(), kind))
    settings = config.model_copy(update={"implementations": implementations})
    return ToolExecutor(catalog.tools(), settings, gateway=gateway, tokenizer=tokenizer,
                        environment_tools=owned)


@dataclass(frozen=True)
class Episode:
    """What an episode needs besides its scenario: the environments, the executor and, for
    simulated environments, the teacher and its settings."""

    catalog: EnvironmentCatalog
    executor: ToolExecutor
    gateway: ChatGateway | None = None
    simulation: SimulationConfig | None = None
    now: dt.datetime = DEFAULT_NOW
    """The episodes' clock (a scenario's own clock, where it has one, comes first)."""
    stage: str = "synthesize"

    def open(self, scenario: Scenario, now: dt.datetime | None = None) -> EnvironmentSession:
        return EnvironmentSession(self.catalog, scenario.environment,
                                  initial_state=scenario.initial_state, gateway=self.gateway,
                                  simulation=self.simulation, now=now or self.now,
                                  stage=self.stage)

    def open_all(self) -> EnvironmentSession:
        """An episode in every environment but the reserved ones (a plain query's)."""
        return EnvironmentSession(self.catalog, None, gateway=self.gateway,
                                  simulation=self.simulation, now=self.now, stage=self.stage)

    async def run_step(self, calls: Sequence[Call], session: EnvironmentSession
                       ) -> list[Observation]:
        context = session.context()
        return list(await asyncio.gather(*(
            self.executor.execute(c.name, dict(c.arguments), context=context) for c in calls)))


@asynccontextmanager
async def open_episodes(catalog: EnvironmentCatalog, tools: ToolsConfig, *, stage: str,
                        gateway: ChatGateway | None = None,
                        now: dt.datetime | None = None) -> AsyncIterator[Episode]:
    """The episodes of a stage (or a command): one executor for every tool of ``catalog``,
    closed on leaving; ``gateway`` plays the simulated environments under ``tools.simulation``;
    ``now`` is the clock of scenarios without one of their own."""
    async with executor_for(catalog, tools, gateway=gateway) as executor:
        yield Episode(catalog, executor, gateway=gateway, simulation=tools.simulation,
                      now=now or DEFAULT_NOW, stage=stage)


def observation_value(observation: Observation) -> Any:
    """An observation's content as JSON when it is JSON, else the text."""
    try:
        return json.loads(observation.content)
    except json.JSONDecodeError:
        return observation.content


async def execute_ground_truth(scenario: Scenario, episode: Episode) -> GroundTruthRun:
    """Run the ground truth in a fresh session; a call that fails, or no change of state where a
    writing tool was called, is the run's problem."""
    session = episode.open(scenario)
    run = GroundTruthRun(initial_state=session.state())
    for i, step in enumerate(scenario.ground_truth):
        observations = await episode.run_step(step, session)
        run.results.append([observation_value(o) for o in observations])
        for j, (call, obs) in enumerate(zip(step, observations, strict=True)):
            if not obs.ok:
                run.problem = ("ground_truth_failed", f"ground_truth[{i}][{j}] {call.name}: "
                               f"{obs.error_kind}: {obs.content[:200]}")
                return run
    run.expected_state = session.state()
    generated = generated_paths(episode.catalog, scenario.environment)
    if expects_change(scenario, episode.catalog) and state_unchanged(
            run.initial_state, run.expected_state, generated):
        run.problem = ("no_state_change", "the ground truth calls a tool that writes, but the "
                       "state is unchanged")
    return run
