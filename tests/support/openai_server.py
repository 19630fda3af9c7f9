"""A real OpenAI-compatible HTTP server for tests: starlette + uvicorn in a background thread.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port), records every request, and
answers each one with a scripted action::

    with OpenAITestServer([rate_limited(1), Reply("hi")]) as srv:
        ...  # point a client at srv.base_url; srv.requests holds what arrived

``script`` is either a list of actions used in order (then ``default`` for every later request)
or a callable ``(request_body, n) -> action`` where ``n`` counts requests from 0. ``latency_s``
(seconds, or a callable drawing them) delays every answer; together with ``in_flight`` /
``max_in_flight`` that is the base of a latency-simulating benchmark server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True)
class Reply:
    """A successful chat completion. ``tool_calls`` items are ``{"name": ..., "arguments": ...}``
    (arguments as a dict, or as the exact string to send)."""

    content: str | None = "ok"
    tool_calls: Sequence[Mapping[str, Any]] = ()
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"
    prompt_tokens: int = 10
    completion_tokens: int = 5


@dataclass(frozen=True)
class Fail:
    """An HTTP error with an OpenAI-style error body."""

    status: int = 500
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "scripted failure"


def rate_limited(retry_after_s: float) -> Fail:
    """A 429 asking the client to wait ``retry_after_s`` seconds."""
    return Fail(429, {"Retry-After": f"{retry_after_s:g}"}, "rate limit reached")


@dataclass(frozen=True)
class Hang:
    """Say nothing for ``seconds`` (cut short when the server stops), then perform ``then``."""

    seconds: float
    then: Action = field(default_factory=Reply)


@dataclass(frozen=True)
class Malformed:
    """A body sent as-is, by default a truncated JSON document with status 200."""

    body: str = '{"id": "chatcmpl-broken", "choices": [{"index": 0, "mess'
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Drop:
    """Break the connection without an answer.

    ASGI has no "reset the socket" message, so the server sends the status line and headers
    (promising a body) and then ends the response without one; uvicorn then closes the connection
    (and logs "ASGI callable returned without completing response"). The client sees the peer
    close mid-response, the same failure as a reset.
    """


Action = Reply | Fail | Hang | Malformed | Drop
Script = Sequence[Action] | Callable[[dict[str, Any], int], Action]


@dataclass(frozen=True)
class RecordedRequest:
    n: int
    body: dict[str, Any]
    headers: dict[str, str]
    arrived: float  # time.monotonic() when the request was read


class OpenAITestServer:
    def __init__(
        self,
        script: Script = (),
        *,
        default: Action = Reply(),
        latency_s: float | Callable[[], float] = 0.0,
    ) -> None:
        self.script = script
        self.default = default
        self.latency_s = latency_s
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_config=None, log_level="warning", timeout_graceful_shutdown=5)
        )
        self._thread = threading.Thread(
            target=self._run, name=f"openai-test-server-{self.port}", daemon=True
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def start(self, timeout_s: float = 10.0) -> OpenAITestServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def arrival_gaps(self) -> list[float]:
        """Seconds between consecutive requests' arrivals."""
        times = [r.arrived for r in self.requests]
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            await self._server.serve(sockets=[self._socket])

        asyncio.run(serve())

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            n = len(self.requests)
            self.requests.append(RecordedRequest(n, body, dict(request.headers), time.monotonic()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            action = self._action(body, n)
            latency = self.latency_s() if callable(self.latency_s) else self.latency_s
            await self._pause(latency)
            return await self._perform(action, body, n)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _action(self, body: dict[str, Any], n: int) -> Action:
        if callable(self.script):
            return self.script(body, n)
        return self.script[n] if n < len(self.script) else self.default

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops so shutdown never waits on a hang."""
        if seconds <= 0:
            return
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _perform(self, action: Action, body: dict[str, Any], n: int) -> Response:
        match action:
            case Reply():
                return JSONResponse(_completion(action, body, n))
            case Fail(status=status, headers=headers, message=message):
                error = {"message": message, "type": "scripted_error", "code": str(status)}
                return JSONResponse({"error": error}, status_code=status, headers=dict(headers))
            case Hang(seconds=seconds, then=then):
                await self._pause(seconds)
                return await self._perform(then, body, n)
            case Malformed(body=text, status=status, content_type=content_type):
                return Response(text, status_code=status, media_type=content_type)
            case Drop():
                return _DroppedResponse()
        raise TypeError(f"not a test server action: {action!r}")


class _DroppedResponse(Response):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})


def _completion(reply: Reply, body: dict[str, Any], n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call["arguments"], str)
                    else json.dumps(call["arguments"]),
                },
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }
