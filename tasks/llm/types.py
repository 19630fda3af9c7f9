"""The gateway's request and response: an OpenAI chat-completions request, a provider-neutral result."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

Role = Literal["teacher", "judge", "student"]


class ChatRequest(BaseModel):
    """The subset of an OpenAI chat-completions request that agentune sends.

    ``top_k`` is not an OpenAI parameter; vLLM accepts it (sent in the body) and the local
    provider uses it. ``frequency_penalty`` / ``presence_penalty`` are OpenAI's, honoured by vLLM
    and the local provider (tasks/llm/token_penalties.py); a penalty of 0 is no penalty and is
    kept as None (not sent), so a request and its cache key are the same either way.
    ``response_format`` may be ``{"type": "json_object"}`` or
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
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    stop: list[str] | None = None
    _serialised: tuple[int, bytes] | None = PrivateAttr(None)

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _zero_is_none(cls, value: float | None) -> float | None:
        return None if value == 0 else value

    def body_json(self) -> bytes:
        """The request's set fields as JSON (UTF-8), what the HTTP body and the cache key are
        made of; serialised once per request object (a request is not changed once asked:
        ``model_copy`` makes a new object, serialised anew)."""
        memo = self._serialised
        if memo is None or memo[0] != id(self):
            memo = (id(self), self.model_dump_json(exclude_none=True).encode("utf-8"))
            self._serialised = memo
        return memo[1]

    def cache_key(self, provider: str, model: str) -> CacheKey:
        """Hash of everything that decides the answer: provider, model and every set parameter,
        serialised by pydantic-core in one pass (a quarter of the time of a ``model_dump`` and a
        key-sorted ``json.dumps``, which the 20 kB requests of synthesis made a sizeable share
        of its loop). Unlike the first format, mapping keys count in the order they were
        written (the same code writes the same order). The key carries
        :meth:`legacy_cache_key` for caches written before."""
        digest = hashlib.sha256(_KEY_FORMAT + _field(provider) + _field(model) + self.body_json())
        return CacheKey(digest.hexdigest(), lambda: self.legacy_cache_key(provider, model))

    def legacy_cache_key(self, provider: str, model: str) -> str:
        """The key of the first format (before format 2): the hash of the key-sorted
        JSON of ``{"provider", "model", "request"}``. A cache written then is still read
        (``ResponseCache.get``), so no answer paid for then is asked again."""
        body = self.model_dump(exclude_none=True)
        blob = json.dumps(
            {"provider": provider, "model": model, "request": body},
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_KEY_FORMAT = b"agentune-cache-key/2\n"


def _field(text: str) -> bytes:
    """A length-prefixed field: no provider and model pair runs into another's."""
    data = text.encode("utf-8")
    return f"{len(data)}:".encode() + data


class CacheKey(str):
    """A request's response-cache key (a hex digest), with the key the same request had under
    the previous format (``legacy``, computed only when asked: a cache that may hold entries
    of that format looks it up on a miss)."""

    __slots__ = ("_legacy",)

    def __new__(cls, digest: str, legacy: Callable[[], str]) -> CacheKey:
        key = super().__new__(cls, digest)
        key._legacy = legacy
        return key

    def legacy(self) -> str:
        return self._legacy()


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

    def content_field(self, key: str) -> Any:
        """The value under ``key`` of a JSON-object answer; None when it is not one or lacks
        the key."""
        try:
            answer = self.parsed_content()
        except ValueError:
            return None
        return answer.get(key) if isinstance(answer, dict) else None


class Provider(Protocol):
    """One way of answering a request. Raises ``RetryableError`` for transient faults."""

    name: str
    model: str

    async def complete(self, request: ChatRequest) -> ChatResult: ...

    async def aclose(self) -> None: ...


class ChatGateway(Protocol):
    """What a stage needs of ``LLMGateway``: tests pass a scripted stand-in."""

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult: ...
