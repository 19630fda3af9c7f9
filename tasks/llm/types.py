"""The gateway's request and response: an OpenAI chat-completions request, a provider-neutral result."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["teacher", "judge", "student"]


class ChatRequest(BaseModel):
    """The subset of an OpenAI chat-completions request that agentune sends.

    ``top_k`` is not an OpenAI parameter; vLLM accepts it (sent in the body) and the local
    provider uses it. ``response_format`` may be ``{"type": "json_object"}`` or
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": true}}``.
    """

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=1)
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    stop: list[str] | None = None

    def cache_key(self, provider: str, model: str) -> str:
        """Hash of everything that decides the answer: provider, model and every set parameter."""
        body = self.model_dump(exclude_none=True)
        blob = json.dumps(
            {"provider": provider, "model": model, "request": body},
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str = Field(description="The arguments as the model wrote them (a JSON string).")

    def parsed_arguments(self) -> Any:
        """The arguments decoded; raises ``ValueError`` when the model wrote invalid JSON."""
        return json.loads(self.arguments)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatResult(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    cached: bool = Field(False, description="True when served from the response cache.")

    def parsed_content(self) -> Any:
        """The content decoded as JSON; raises ``ValueError`` when it is not."""
        return json.loads(self.content or "")


class Provider(Protocol):
    """One way of answering a request. Raises ``RetryableError`` for transient faults."""

    name: str
    model: str

    async def complete(self, request: ChatRequest) -> ChatResult: ...

    async def aclose(self) -> None: ...


class ChatGateway(Protocol):
    """What a stage needs of ``LLMGateway``: tests pass a scripted stand-in."""

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult: ...
