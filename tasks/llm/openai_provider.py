"""The `openai` provider: any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang ...).

It makes exactly one HTTP attempt per call (the SDK's own retries are off) and classifies every
failure as ``RetryableError`` or ``GatewayError``; retrying, limits and caching are the gateway's.
No message it raises contains the API key, and SDK exceptions are not chained (their request
objects carry the Authorization header).

The request is posted with the SDK's generic ``post`` rather than ``chat.completions.create``:
``create`` walks the whole body (every message, tool and JSON schema) to transform typed
parameters, a third of the SDK's CPU per call, and the body here is already plain JSON from
``ChatRequest``. Status errors, timeouts, auth headers and response parsing stay the SDK's.
The SDK's aiohttp transport (the ``openai[aiohttp]`` extra) carries the requests: httpx's
connection pool probes every idle connection on each request, which at dozens of requests in
flight costs more CPU than the rest of the call (see tests/benchmarks/test_synthesis_throughput.py).
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

import openai

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.errors import GatewayError, RetryableError
from agentune.tasks.llm.types import ChatRequest, ChatResult, ToolCall, Usage

# A key-less local server (vLLM without --api-key) accepts anything; the SDK insists on some value.
_PLACEHOLDER_KEY = "EMPTY"
# Statuses the server uses for "try again later": timeout, lock conflict, rate limit, server side.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_MAX_DETAIL_CHARS = 300


class OpenAIProvider:
    """Answers requests from an OpenAI-compatible endpoint described by one ``RoleConfig``."""

    name = "openai"

    def __init__(self, role: RoleConfig) -> None:
        self.model = role.model
        self.base_url = role.base_url
        self.timeout_s = role.request_timeout_s
        self._api_key = _api_key(role)
        self._client = openai.AsyncOpenAI(
            base_url=role.base_url,
            api_key=self._api_key,
            max_retries=0,
            timeout=role.request_timeout_s,
            http_client=openai.DefaultAioHttpClient(timeout=role.request_timeout_s),
        )

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages: the base URL or the SDK's default."""
        return self.base_url or str(self._client.base_url)

    async def complete(self, request: ChatRequest) -> ChatResult:
        try:
            completion = await self._client.post(
                "/chat/completions",
                content=self._body(request),
                cast_to=dict[str, object],
                options={"security": {"bearer_auth": True}},
            )
        except openai.APIStatusError as exc:
            raise self._classify_status(exc) from None
        except openai.APITimeoutError as exc:
            if _refused(exc):
                # The aiohttp transport reports a refused connection as a connect timeout.
                raise RetryableError(
                    f"{self._where()}: connection failed: {self._detail(exc.__cause__ or exc)}"
                ) from None
            raise RetryableError(
                f"{self._where()}: no answer within {self.timeout_s:g} s"
            ) from None
        except openai.APIConnectionError as exc:
            raise RetryableError(
                f"{self._where()}: connection failed: {self._detail(exc, with_cause=True)}"
            ) from None
        except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RetryableError(
                f"{self._where()}: undecodable response body: {self._detail(exc)}"
            ) from None
        except openai.OpenAIError as exc:
            raise GatewayError(f"{self._where()}: {self._detail(exc)}") from None
        if not isinstance(completion, dict):
            # The SDK hands back the raw text when the Content-Type is not JSON.
            raise RetryableError(f"{self._where()}: response is not a JSON chat completion")
        return self._result(completion)

    async def aclose(self) -> None:
        await self._client.close()

    def _body(self, request: ChatRequest) -> bytes:
        """The request body as JSON bytes: the request's own serialisation (made once, for its
        cache key too, by pydantic-core: a dict dump and the SDK's ``json.dumps`` of it took ~4x
        as long, a tenth of synthesis' loop at 64 calls in flight). top_k is not an OpenAI
        parameter; vLLM and SGLang read it from the body."""
        return b'{"model":' + json.dumps(self.model).encode("utf-8") + b"," + request.body_json()[1:]

    def _result(self, completion: dict[str, Any]) -> ChatResult:
        """Our result from the decoded body, read as plain JSON: the SDK's ``ChatCompletion``
        would be built field by field without validation (~80 us a call against ~10 us here)
        and a wrong shape would only surface when read, as it does here."""
        try:
            if not completion.get("choices"):
                raise RetryableError(f"{self._where()}: response has no choices")
            choice = completion["choices"][0]
            message = choice["message"]
            usage = completion.get("usage") or {}
            tool_calls = [_tool_call(call) for call in message.get("tool_calls") or []]
            content = message.get("content")
            if tool_calls and content == "":
                # vLLM sends "" beside tool calls where OpenAI sends null: one form for both,
                # so the recorded assistant message (and the cache) do not depend on the server.
                content = None
            return ChatResult(
                content=content,
                tool_calls=tool_calls,
                finish_reason=choice.get("finish_reason"),
                usage=Usage(prompt_tokens=usage.get("prompt_tokens") or 0,
                            completion_tokens=usage.get("completion_tokens") or 0),
                model=completion.get("model") or self.model,
            )
        except (LookupError, AttributeError, TypeError, ValueError) as exc:
            raise RetryableError(
                f"{self._where()}: malformed chat completion: {self._detail(exc)}"
            ) from None

    def _classify_status(self, exc: openai.APIStatusError) -> Exception:
        status = exc.status_code
        message = f"{self._where()}: HTTP {status}: {self._detail(exc)}"
        if status in _RETRYABLE_STATUSES or status >= 500:
            return RetryableError(message, retry_after=retry_after_s(exc.response.headers))
        return GatewayError(message)

    def _where(self) -> str:
        return f"openai endpoint {self.endpoint} (model {self.model!r})"

    def _detail(self, exc: BaseException, *, with_cause: bool = False) -> str:
        """The exception's text (and its cause's), shortened and with the key blanked out."""
        text = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__ or exc.__context__
        if with_cause and cause is not None:
            text += f" ({type(cause).__name__}: {cause})"
        if self._api_key and self._api_key != _PLACEHOLDER_KEY:
            text = text.replace(self._api_key, "***")
        return text[:_MAX_DETAIL_CHARS]


def _refused(exc: BaseException) -> bool:
    """Whether a connection error (refused, unreachable, reset) is behind ``exc``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _tool_call(call: Any) -> ToolCall:
    # Only function tools are ever sent, so any other kind of call is a broken answer.
    if call.get("type", "function") != "function":
        raise TypeError(f"unexpected tool call {call!r}")
    function = call["function"]
    return ToolCall(id=call["id"], name=function["name"], arguments=function["arguments"])


def retry_after_s(headers: Any) -> float | None:
    """The wait a server asks for, in seconds: ``retry-after-ms``, or ``Retry-After`` as seconds
    or an HTTP date. ``None`` when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _api_key(role: RoleConfig) -> str:
    key = os.environ.get(role.api_key_env)
    if key:
        return key
    if role.base_url and _is_loopback(role.base_url):
        return _PLACEHOLDER_KEY
    raise GatewayError(
        f"environment variable {role.api_key_env} is not set: it must hold the API key for "
        f"{role.base_url or 'the OpenAI API'} (model {role.model!r}); for a server without "
        f"authentication set it to any value, e.g. {_PLACEHOLDER_KEY}"
    )


def _is_loopback(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
