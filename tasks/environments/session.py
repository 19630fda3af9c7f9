"""One episode's environments: fresh instances, loaded with a scenario's state, called by name.

A session is what a trajectory (or its replay by the verifier, or an evaluation rollout) acts in.
Python environments are new instances; simulated ones are new worlds played by the teacher;
built-in implementations are stateless and answered by the tool executor. ``call`` raises
:class:`ToolFailure` for a failure the agent should see (a :class:`ToolError` of the environment,
a bug in it, the simulator failing, an argument the method does not take); the state is unchanged by a failed call.
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from agentune.config.tools import SimulationConfig
from agentune.tasks.environments.base import Environment, ToolError, snapshot
from agentune.tasks.environments.catalog import EnvironmentCatalog, EnvironmentSpec
from agentune.tasks.environments.simulated import SimulatedWorld
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.tools.observation import ToolAnswer, ToolContext, ToolFailure

log = logging.getLogger("agentune.environments")

DEFAULT_NOW = dt.datetime.fromisoformat("2025-06-02T09:30:00+08:00")
"""The clock of an episode when none is given: the demo environments' "today"."""


class EnvironmentSession:
    """The environments of one episode in ``environment`` (plus the shared ones).

    ``initial_state`` maps an environment's name to the top-level state entries the scenario
    sets; the rest keep the environment's defaults. ``gateway`` and ``simulation`` are needed
    only when a simulated environment is opened.
    """

    def __init__(self, catalog: EnvironmentCatalog, environment: str | None, *,
                 initial_state: Mapping[str, Mapping[str, Any]] | None = None,
                 gateway: ChatGateway | None = None, simulation: SimulationConfig | None = None,
                 now: dt.datetime = DEFAULT_NOW, stage: str = "synthesize") -> None:
        self.catalog = catalog
        self.now = now
        self.stage = stage
        self.specs = catalog.offered(environment) if environment is not None else [
            s for s in catalog.environments.values() if not s.reserved]
        self.tool_owner = {t.name: spec for spec in self.specs for t in spec.tools}
        self._live: dict[str, Environment | SimulatedWorld] = {}
        states = dict(initial_state or {})
        for spec in self.specs:
            if spec.kind == "python":
                assert spec.python is not None
                instance: Environment | SimulatedWorld = spec.python.new()
            elif spec.kind == "simulated":
                assert spec.simulated is not None
                if gateway is None or simulation is None:
                    raise ValueError(f"environment {spec.name!r} is simulated: a session in it "
                                     "needs the LLM gateway and the simulation settings")
                instance = SimulatedWorld(spec.simulated, gateway, simulation,
                                          today=now.date(), stage=stage)
            else:
                continue
            instance.reset(**dict(states.get(spec.name, {})))
            self._live[spec.name] = instance

    def context(self) -> ToolContext:
        """The tool context of this episode's calls."""
        return ToolContext(stage=self.stage, now=self.now, session=self)

    def tools(self) -> list[Any]:
        return [t for spec in self.specs for t in spec.tools]

    def owner(self, tool: str) -> EnvironmentSpec:
        return self.tool_owner[tool]

    def state(self) -> dict[str, Any]:
        """``{environment: state}`` of every stateful environment of the session."""
        return {name: snapshot(env.state()) for name, env in self._live.items()}

    def handles(self, tool: str) -> bool:
        """Whether the session answers ``tool`` (built-in implementations are the executor's)."""
        spec = self.tool_owner.get(tool)
        return spec is not None and spec.name in self._live

    async def call(self, tool: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        """The tool's answer (JSON-serialisable, or a ToolAnswer from a simulated world)."""
        spec = self.tool_owner[tool]
        live = self._live[spec.name]
        if isinstance(live, SimulatedWorld):
            return await live.call(tool, arguments)
        method = getattr(live, tool)
        try:
            inspect.signature(method).bind(**arguments)
        except TypeError as exc:  # an argument the schema allows but the method has no name for
            raise ToolFailure("invalid_arguments", f"invalid arguments for {tool}: {exc}") from None
        before = snapshot(live.state())
        try:
            return method(**arguments)
        except ToolError as exc:
            live.reset(**before)
            raise ToolFailure("execution", str(exc)) from None
        except Exception as exc:  # a bug in the environment: reported, never a crash of the run
            log.exception("environment %s: tool %s failed on %r", spec.name, tool, arguments)
            live.reset(**before)
            raise ToolFailure("execution", f"{tool} failed: {type(exc).__name__}: {exc}") from None


def answer_payload(answer: Any) -> Any:
    """A call's result as the agent sees it (a simulated world's answer carries extras)."""
    return answer.payload if isinstance(answer, ToolAnswer) else answer
