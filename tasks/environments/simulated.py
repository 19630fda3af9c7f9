"""Simulated environments: the teacher plays a set of tools, now with memory.

Each call shows the teacher the tool's documentation (and, when declared, its output schema and
example responses), the world state as it stands, and the session's earlier calls with their
responses; the teacher answers with the response and the world's top-level entries the call
changed. So a search returns an id that a later booking call in the same session finds in the
history and the world. The requests are deterministic (temperature 0, a seed from the call), so
the response cache makes a replay of the same session give the same answers.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from agentune.config.tools import SimulationConfig
from agentune.tasks.llm.errors import EndpointUnreachable, GatewayError
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.observation import ErrorKind, ToolAnswer, ToolFailure
from agentune.tasks.tools.simulator import (
    SimulationMemory,
    build_simulation_request,
    read_simulation,
)


@dataclass(frozen=True)
class SimulatedSpec:
    """A simulated environment as the environments file declares it."""

    tools: tuple[ToolSpec, ...]
    state: Mapping[str, Any] = field(default_factory=dict)
    """The world's default state; a scenario's initial state replaces top-level entries."""
    output_schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    examples: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)


class SimulatedWorld:
    """One session's simulated environment (the counterpart of a Python environment instance)."""

    def __init__(self, spec: SimulatedSpec, gateway: ChatGateway, config: SimulationConfig, *,
                 today: dt.date, stage: str) -> None:
        self.spec = spec
        self.tools = {t.name: t for t in spec.tools}
        self.gateway = gateway
        self.config = config
        self.today = today
        self.stage = stage
        self.world: dict[str, Any] = {}
        self.history: list[tuple[str, dict[str, Any], Any]] = []
        self.reset()

    def reset(self, **initial_state: Any) -> None:
        self.world = copy.deepcopy({**self.spec.state, **initial_state})
        self.history = []

    def state(self) -> dict[str, Any]:
        return copy.deepcopy(self.world)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolAnswer:
        memory = SimulationMemory(self.world, self.history, self.spec.output_schemas.get(name),
                                  self.spec.examples.get(name, ()))
        request = build_simulation_request(self.tools[name], arguments, today=self.today,
                                           config=self.config, memory=memory)
        try:
            result = await self.gateway.chat("teacher", request, stage=self.stage)
        except GatewayError as exc:
            kind: ErrorKind = ("simulator_unavailable" if isinstance(exc, EndpointUnreachable)
                               else "simulator_failure")
            raise ToolFailure(kind, f"the simulated {name} API got no answer: {exc}") from None
        answer = read_simulation(result, name, self.config.max_error_chars)
        schema = self.spec.output_schemas.get(name)
        if schema is not None:
            problem = next(iter(Draft202012Validator(dict(schema)).iter_errors(answer.payload)),
                           None)
            if problem is not None:
                raise ToolFailure("simulator_failure", f"the simulated {name} API answered "
                                  f"outside its output schema: {problem.message}")
        self.world.update(copy.deepcopy(answer.state_changes or {}))
        self.history.append((name, dict(arguments), answer.payload))
        return answer
