"""What a tool call gives back to the agent, and how a tool implementation reports failure.

Every outcome of a call is an :class:`Observation`, failures included: the agent has to see an
error to reflect on it, so nothing a tool does may end a trajectory by raising. (The one exception
is a ``RunStop`` from the LLM gateway, the budget reached or a model unloadable, which stops the
whole run and propagates.)

Content is what the agent reads: a JSON document for a successful call (the tool's answer) and
``{"error": "...", ...}`` for a failed one, truncated to the observation token budget.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

ToolKind = Literal["real", "http", "simulated"]
"""real: computed on this machine; http: a remote service; simulated: the teacher plays the API."""

ErrorKind = Literal[
    "unknown_tool",  # no tool of that name in the catalog
    "invalid_arguments",  # arguments not an object, or not valid against the tool's JSON schema
    "timeout",  # the tool's time limit (or the sandbox's wall clock) ran out
    "execution",  # the tool ran and failed: a bad expression, an exception in the user's code ...
    "resource_limit",  # the sandbox's CPU, memory or output limit was hit
    "not_found",  # nothing matches: no article, page or search hit to return
    "http",  # the HTTP service failed (4xx, 5xx after retries, connection refused)
    "rate_limited",  # the HTTP service kept answering 429 until the retries ran out
    "api_error",  # a simulated API answered with an error (injected, or the teacher's choice)
    "simulator_failure",  # the teacher could not play the API (refused, unreadable answer)
    "simulator_unavailable",  # the teacher's endpoint did not answer within its retries
]
"""Why a call failed. ``simulator_*`` kinds are not the agent's doing: a trajectory that met one
should be retried or rejected rather than trained on. Every other kind is a legitimate
observation to reflect on."""


class Observation(BaseModel):
    """The result of one tool call, as the agent loop records it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(description="The tool's name as called.")
    kind: ToolKind | None = Field(description="How it ran; None when no tool of that name exists.")
    ok: bool
    content: str = Field(description="What the agent sees (JSON text), after truncation.")
    error_kind: ErrorKind | None = None
    elapsed_s: float = Field(ge=0, description="Wall time of the call, queueing included.")
    truncated: bool = Field(False, description="True when content was cut to the token budget.")
    content_tokens: int = Field(
        0, ge=0, description="Size of the untruncated content (tokenizer count or estimate)."
    )
    injected_error: bool = Field(
        False, description="True for a simulated API error injected on purpose (reflection cases)."
    )
    cached: bool = Field(False, description="Simulated: the teacher's answer came from the cache.")
    injection: tuple[str, ...] = Field(
        (), description="Instruction-like phrases found in the content (see injection_phrases)."
    )


class ToolSession(Protocol):
    """The environments of one episode (``environments.session.EnvironmentSession``): they
    answer their own tools, with the episode's state."""

    async def call(self, tool: str, arguments: dict[str, Any], context: ToolContext) -> Any: ...


@dataclass(frozen=True)
class ToolContext:
    """Per-call facts the executor cannot know by itself.

    ``now`` is the clock the date tools read and the date the simulated APIs take as "today";
    pinning it per trajectory (or run) keeps tool results reproducible and gateway cache keys
    stable. ``None`` falls back to ``ToolsConfig.now``, then to the real clock. ``session`` is the
    episode's environments, for the tools they own.
    """

    stage: str = "synthesize"
    now: datetime | None = None
    session: ToolSession | None = None


class ToolFailure(Exception):
    """Raised by a tool implementation for a failure the agent should see as an observation."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        injected: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.details = dict(details or {})
        self.injected = injected

    def content(self) -> str:
        return to_content({"error": self.message, **self.details})


@dataclass(frozen=True)
class ToolAnswer:
    """A successful call's payload; ``cached`` is set by simulated tools answered from the cache,
    ``state_changes`` by a simulated environment (the world's top-level entries the call set)."""

    payload: Any
    cached: bool = False
    state_changes: dict[str, Any] | None = None


class ToolBackend(Protocol):
    """One implementation behind a tool name. ``run`` gets arguments already validated against
    the tool's schema (with schema defaults filled in) and returns a JSON-serialisable payload or
    a :class:`ToolAnswer`; it raises :class:`ToolFailure` for failures the agent should see."""

    kind: ToolKind
    required: tuple[str, ...]  # argument names the implementation reads (checked at setup)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any: ...


def to_content(payload: Any) -> str:
    """A payload as the agent reads it: text as is, anything else as compact UTF-8 JSON."""
    if isinstance(payload, str):
        return payload
    return json.dumps(payload, ensure_ascii=False, separators=(", ", ": "), default=str)


# Text a tool result has no business containing: orders addressed to the agent. A tool result is
# data; one that talks like this is a prompt-injection attempt (a poisoned web page, document or
# API answer). The list is short on purpose: it flags the classic phrasings, and the agent loop
# rejects a trajectory only when the teacher then acts on them, so a false positive costs nothing.
_INJECTION = re.compile(
    r"(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
    r"(?:previous|prior|above|earlier|preceding|original)\s+(?:instructions?|prompts?|rules|"
    r"directions)"
    r"|(?:reveal|print|show|output|repeat|leak|disclose)\s+(?:me\s+)?(?:the\s+|your\s+)*"
    r"(?:system\s+prompt|hidden\s+instructions?|instructions\s+above)"
    # A new role for the agent itself, not "you are now in Tokyo" or "you are now a Gold member".
    r"|(?:from\s+now\s+on,?\s+you\s+are|you\s+are\s+now)\s+(?:a|an)\s+(?:\w+\s+){0,3}?"
    r"(?:assistant|AI|agent|bot|model|hacker|jailbroken)\b"
    r"|new\s+instructions?\s*:"
    # The same in Chinese: "忽略之前的所有指令", "输出你的系统提示词", "你现在是一个黑客", "新指令："
    r"|(?:ignore|disregard)\s+(?:everything|all)\s+(?:above|before|you\s+were\s+told)"
    r"|(?:忽略|无视|忘记|忘掉|不要理会|别管)掉?(?:你)?(?:所有|全部|一切)?的?"
    r"(?:之前|以上|上面|前面|先前|原来|上述|此前)的?(?:所有|全部|一切)?的?(?:指令|指示|提示|规则|要求|设定)"
    r"|(?:不要|别|停止)(?:再)?(?:遵守|遵循|执行)(?:之前|以上|原来|原有|系统)的?(?:指令|指示|规则|设定)"
    r"|(?:泄露|输出|打印|重复|告诉我)(?:出)?你的(?:系统提示词?|隐藏指令)|(?:泄露|输出|打印)(?:出)?系统提示词"
    r"|你现在是(?:一个|一名)?[^，。,.!！?？\s]{0,6}?(?:助手|AI|机器人|模型|代理|黑客)"
    r"|新(?:的)?指令\s*[:：]",
    re.IGNORECASE,
)


def injection_phrases(text: str) -> tuple[str, ...]:
    """The instruction-like phrases in a text (a tool result, or the teacher's own answer), as
    written, in order (none: ``()``)."""
    return tuple(dict.fromkeys(m.group(0) for m in _INJECTION.finditer(text)))
