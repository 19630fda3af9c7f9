"""Simulated tools: the teacher answers as an unreachable API would (StableToolBench's idea).

The request renders ``templates/tool_simulator.j2`` with the tool's documentation, its JSON schema,
the call's arguments (canonical JSON, schema defaults filled in) and today's date, and asks for
``{"response": {...}}`` (or, for a call the real API would refuse, ``{"response": {}, "error":
"..."}``) with a ``json_schema`` response format. It is
deterministic (temperature 0, a seed derived from the tool and arguments), so the same call is the
same request, and the gateway's response cache returns the first answer to every repeat: the same
call always gets the same answer, across trajectories and across runs (with ``llm.cache`` on, and
the same "today": pin ``tools.now`` for runs that span days).

A configurable share of calls gets an API error instead, with no teacher call at all (reflection
cases). Whether a call fails, and with which error, is drawn from a hash of the call, so it too is
the same every time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentune.config.tools import SimulationConfig
from agentune.tasks.agent.prompt_templates import macro_request
from agentune.tasks.llm.errors import EndpointUnreachable, GatewayError
from agentune.tasks.llm.types import ChatGateway, ChatRequest, ChatResult
from agentune.tasks.tools.arguments import call_digest, canonical_json
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.dates import WEEKDAYS, reference_now
from agentune.tasks.tools.observation import (
    ErrorKind,
    ToolAnswer,
    ToolContext,
    ToolFailure,
    ToolKind,
)

TEMPLATE = "tool_simulator.j2"
INJECTED_ERRORS: tuple[tuple[int, str], ...] = (
    (503, "Service temporarily unavailable. Please try again later."),
    (429, "Too many requests: the rate limit of this API key is exceeded."),
    (500, "Internal server error."),
    (504, "Gateway timeout: the upstream service did not respond in time."),
)


# Bounds of a simulated API response. A grammar-constrained model (the local provider, vLLM's
# guided decoding) cannot run away inside them: every string, key, list and object is bounded,
# and nesting stops at four levels (response -> list -> record -> flat list or object of scalars).
# Answers are not checked against them: a teacher that is not constrained may go beyond.
MAX_STRING_CHARS = 160
MAX_KEY_CHARS = 40
MAX_ITEMS = 8
MAX_FIELDS = 16


def response_schema() -> dict[str, Any]:
    """The JSON schema of a simulated API response: an object of bounded size and depth."""
    key = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS}
    scalar = {
        "anyOf": [
            {"type": "string", "maxLength": MAX_STRING_CHARS},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ]
    }
    flat = {
        "anyOf": [
            {"type": "array", "items": scalar, "maxItems": MAX_ITEMS},
            {
                "type": "object",
                "propertyNames": key,
                "additionalProperties": scalar,
                "maxProperties": MAX_FIELDS,
            },
        ]
    }
    record = {
        "type": "object",
        "propertyNames": key,
        "additionalProperties": {"anyOf": [scalar, flat]},
        "maxProperties": MAX_FIELDS,
    }
    listing = {"type": "array", "items": {"anyOf": [scalar, record]}, "maxItems": MAX_ITEMS}
    return {
        "type": "object",
        "propertyNames": key,
        "additionalProperties": {"anyOf": [scalar, record, listing]},
        "maxProperties": MAX_FIELDS,
    }


def simulation_schema(max_error_chars: int, *, stateful: bool = False) -> dict[str, Any]:
    """The answer's JSON schema: ``{"response": {...}}``, ``error`` optional, and with memory
    ``state`` (the world's changed top-level entries). ``response`` comes first because a
    grammar-constrained small model writes keys in schema order, and one that had to start with
    an ``error`` string tends to put something in it. Not ``strict``: OpenAI's strict mode allows
    no open-ended objects."""
    properties: dict[str, Any] = {"response": response_schema()}
    if stateful:
        properties["state"] = response_schema()
    properties["error"] = {"type": "string", "maxLength": max_error_chars}
    return {
        "type": "object",
        "properties": properties,
        "required": ["response", "state"] if stateful else ["response"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class SimulationMemory:
    """What a simulated environment shows the teacher besides the call: its world state, the
    session's earlier calls and responses, and the tool's declared output schema and examples."""

    world: Mapping[str, Any]
    history: Sequence[tuple[str, Mapping[str, Any], Any]] = ()
    output_schema: Mapping[str, Any] | None = None
    examples: Sequence[Mapping[str, Any]] = ()

    def prompt_args(self) -> dict[str, str]:
        history = "\n".join(f"{i}. {name}({canonical_json(dict(args))}) -> "
                            f"{canonical_json(response)}"
                            for i, (name, args, response) in enumerate(self.history, 1))
        return {"world": canonical_json(dict(self.world)), "history": history,
                "output_schema": canonical_json(dict(self.output_schema))
                if self.output_schema else "",
                "examples": "\n".join(canonical_json(dict(e)) for e in self.examples)}


def injected_error(
    config: SimulationConfig, tool: str, arguments: dict[str, Any]
) -> tuple[int, str] | None:
    """The API error this call is drawn to get, or None (the same answer for the same call)."""
    digest = call_digest(f"error:{config.seed}", tool, arguments)
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw >= config.error_rate:
        return None
    return INJECTED_ERRORS[int.from_bytes(digest[8:12], "big") % len(INJECTED_ERRORS)]


def simulation_seed(config: SimulationConfig, tool: str, arguments: dict[str, Any]) -> int:
    digest = call_digest(f"seed:{config.seed}", tool, arguments)
    return int.from_bytes(digest[:4], "big") % 2**31


def build_simulation_request(
    tool: ToolSpec, arguments: dict[str, Any], *, today: dt.date, config: SimulationConfig,
    memory: SimulationMemory | None = None,
) -> ChatRequest:
    """The teacher's request for one call; with ``memory``, also the world and the history (the
    stateless request is unchanged by memory's existence, so its cache keys stay)."""
    user = dict(
        name=tool.name,
        description=tool.description,
        parameters=canonical_json(tool.parameters),
        arguments=canonical_json(arguments),
        today=f"{today.isoformat()} ({WEEKDAYS[today.weekday()]})",
        max_error_chars=config.max_error_chars,
        **(memory.prompt_args() if memory is not None else {}),
    )
    return macro_request(
        TEMPLATE, user, schema_name="api_response",
        schema=simulation_schema(config.max_error_chars, stateful=memory is not None),
        strict=False,
        temperature=0.0,
        seed=simulation_seed(config, tool.name, arguments),
        max_tokens=config.max_tokens,
    )


def read_simulation(result: ChatResult, tool: str, max_error_chars: int) -> ToolAnswer:
    """The API response in a teacher answer (with memory, ``ToolAnswer.state_changes`` too);
    raises ToolFailure for an error or a bad answer."""
    try:
        answer = result.parsed_content()
    except ValueError:
        answer = None
    if (
        not isinstance(answer, dict)
        or not isinstance(answer.get("error", ""), str)
        or not isinstance(answer.get("response", {}), dict)
        or not ({"error", "response"} & set(answer))
    ):
        excerpt = (result.content or "")[:120]
        raise ToolFailure(
            "simulator_failure",
            f"the simulated {tool} API gave an unreadable answer: {excerpt!r}",
        )
    error = answer.get("error", "").strip()
    if error:
        raise ToolFailure("api_error", error[:max_error_chars])
    changes = answer.get("state")
    return ToolAnswer(answer.get("response", {}), cached=result.cached,
                      state_changes=dict(changes) if isinstance(changes, dict) else None)


class SimulatedTool:
    """Backend of any catalog tool: the teacher plays the API."""

    kind: ToolKind = "simulated"
    required: tuple[str, ...] = ()

    def __init__(
        self,
        tool: ToolSpec,
        gateway: ChatGateway,
        config: SimulationConfig,
        pinned_now: dt.datetime | None = None,
    ) -> None:
        self.tool = tool
        self.gateway = gateway
        self.config = config
        self.pinned_now = pinned_now

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolAnswer:
        error = injected_error(self.config, self.tool.name, arguments)
        if error is not None:
            status, message = error
            raise ToolFailure("api_error", message, details={"status": status}, injected=True)
        today = reference_now(context, self.pinned_now).date()
        request = build_simulation_request(self.tool, arguments, today=today, config=self.config)
        try:
            result = await self.gateway.chat("teacher", request, stage=context.stage)
        except GatewayError as exc:
            kind: ErrorKind = ("simulator_unavailable" if isinstance(exc, EndpointUnreachable)
                               else "simulator_failure")
            raise ToolFailure(
                kind, f"the simulated {self.tool.name} API got no answer: {exc}"
            ) from None
        return read_simulation(result, self.tool.name, self.config.max_error_chars)
