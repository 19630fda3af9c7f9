"""A real OpenAI-compatible HTTP server for tests and benchmarks: starlette + uvicorn on 127.0.0.1.

It serves ``POST /v1/chat/completions`` on a free loopback port, records every request, and
answers each one with a scripted action::

    with OpenAITestServer([rate_limited(1), Reply("hi")]) as srv:
        ...  # point a client at srv.base_url; srv.requests holds what arrived

``script`` is either a list of actions used in order (then ``default`` for every later request)
or a callable ``(request_body, n) -> action`` where ``n`` counts requests from 0.

What the server simulates besides the script (all off by default):

- **latency**: ``latency_s`` delays every answer: seconds, or a callable drawing them, such as
  the seeded distributions ``Latency.fixed(0.2)``, ``Latency.uniform(0.1, 0.3, seed=0)`` and
  ``Latency.lognormal(median_s=0.2, p99_s=1.0, seed=0)``.
- **concurrency**: ``max_concurrency=N`` serves at most N requests at once; the others wait for
  a slot (``overflow="queue"``, the wait is not part of the latency) or are answered at once with
  a 429 and ``Retry-After: overflow_retry_after_s`` (``overflow="reject"``; counted in
  ``rejected``).
- **token limits**: ``context_tokens=N`` answers a request whose estimated prompt
  (:func:`estimate_tokens`: messages + tools, about four characters a token) exceeds N with
  OpenAI's 400 ``context_length_exceeded`` error body. ``honour_max_tokens=True`` cuts a reply
  whose content is longer than the request's ``max_tokens`` / ``max_completion_tokens``
  (about four characters a token) to that length, with ``finish_reason: "length"``.

The faults a script can inject, action by action:

=========================================  ===================================================
fault                                      action
=========================================  ===================================================
429 with ``Retry-After``                   ``rate_limited(seconds)`` (or ``max_concurrency``
                                           with ``overflow="reject"``)
500 / 503                                  ``Fail(500)``, ``unavailable(retry_after_s=None)``
connection reset                           ``Drop()`` (headers promise a body, none comes)
hang past the client's timeout             ``Hang(seconds, then=...)``
malformed JSON body                        ``Malformed()`` (any body/status/content type)
truncated content                          ``truncated(text, keep_chars)`` (``finish_reason:
                                           "length"``), or ``honour_max_tokens=True``
wrong schema in structured output          ``wrong_schema({...})``: valid JSON content that does
                                           not match the request's ``response_format``
tool call to an unknown tool               ``unknown_tool_call("no_such_tool", {...})``
context too long                           ``context_tokens=N``, or ``context_length_exceeded(n, m)``
=========================================  ===================================================

Every request is recorded (:class:`RecordedRequest`: body, headers, and when it arrived, got a
slot and was answered, with the status), so a test can check retries, Retry-After waits and
per-request service time. ``in_flight`` / ``max_in_flight`` count open requests (queued ones
included), ``serving`` / ``max_serving`` those holding a slot.

:class:`OpenAITestServerProcess` runs the same server in a child process (a benchmark measuring
the client's CPU must not share the client's interpreter); its script must be picklable, e.g. an
instance of a class defined at module level in an importable module.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import multiprocessing
import random
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from support.loopback_server import LoopbackServer, Startable

CHARS_PER_TOKEN = 4
"""The token estimate's rule of thumb, the same as the gateway's rate limiter."""
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


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
    """An HTTP error with an OpenAI-style error body (``type`` and ``code`` as OpenAI names them
    when given, else ``scripted_error`` and the status)."""

    status: int = 500
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "scripted failure"
    type: str = "scripted_error"
    code: str | None = None
    param: str | None = None


def rate_limited(retry_after_s: float) -> Fail:
    """A 429 asking the client to wait ``retry_after_s`` seconds."""
    return Fail(429, {"Retry-After": f"{retry_after_s:g}"}, "rate limit reached")


def unavailable(retry_after_s: float | None = None) -> Fail:
    """A 503 (server overloaded), with ``Retry-After`` when ``retry_after_s`` is given."""
    headers = {} if retry_after_s is None else {"Retry-After": f"{retry_after_s:g}"}
    return Fail(503, headers, "the server is overloaded", "server_error")


def context_length_exceeded(limit: int, prompt_tokens: int) -> Fail:
    """OpenAI's 400 for a prompt longer than the model's context."""
    return Fail(
        400,
        message=f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
        param="messages",
    )


def truncated(content: str, keep_chars: int) -> Reply:
    """``content`` cut after ``keep_chars`` characters, as a model stopped by its token limit."""
    return Reply(content[:keep_chars], finish_reason="length")


def wrong_schema(value: Any = None) -> Reply:
    """Valid JSON that matches no structured-output schema a client asked for (by default an
    object with one unexpected key)."""
    return Reply(json.dumps({"unexpected": "field"} if value is None else value))


def unknown_tool_call(name: str = "no_such_tool", arguments: Any = None) -> Reply:
    """A native tool call to a tool the request did not offer."""
    return Reply(None, tool_calls=[{"name": name, "arguments": arguments or {}}])


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
Overflow = Literal["queue", "reject"]


class Latency:
    """A seeded latency distribution: call it for the next delay in seconds.

    ``fixed(s)``: always ``s``. ``uniform(low, high)``: evenly spread. ``lognormal(median_s,
    p99_s)``: the long-tailed shape of real endpoints, half the delays below ``median_s`` and
    one in a hundred above ``p99_s`` (sigma = ln(p99/median) / z_0.99). The same seed gives the
    same sequence; instances pickle, so they also work in :class:`OpenAITestServerProcess`.
    """

    def __init__(self, draw: Callable[[random.Random], float], seed: int, label: str) -> None:
        self._draw = draw
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.label = label

    def __call__(self) -> float:
        with self._lock:
            return max(0.0, self._draw(self._rng))

    def __repr__(self) -> str:
        return f"Latency.{self.label}"

    def __getstate__(self) -> dict[str, Any]:
        return {"draw": self._draw, "rng": self._rng, "label": self.label}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._draw, self._rng, self.label = state["draw"], state["rng"], state["label"]
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        return cls(_Fixed(seconds), 0, f"fixed({seconds:g})")

    @classmethod
    def uniform(cls, low_s: float, high_s: float, *, seed: int = 0) -> Latency:
        if not 0 <= low_s <= high_s:
            raise ValueError(f"uniform latency needs 0 <= low <= high, got {low_s}, {high_s}")
        return cls(_Uniform(low_s, high_s), seed, f"uniform({low_s:g}, {high_s:g})")

    @classmethod
    def lognormal(cls, median_s: float, p99_s: float, *, seed: int = 0) -> Latency:
        if not 0 < median_s <= p99_s:
            raise ValueError(f"lognormal latency needs 0 < median <= p99, got {median_s}, {p99_s}")
        sigma = math.log(p99_s / median_s) / _Z99
        return cls(_LogNormal(math.log(median_s), sigma), seed,
                   f"lognormal(median={median_s:g}, p99={p99_s:g})")


@dataclass(frozen=True)
class _Fixed:
    seconds: float

    def __call__(self, rng: random.Random) -> float:
        return self.seconds


@dataclass(frozen=True)
class _Uniform:
    low: float
    high: float

    def __call__(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)


@dataclass(frozen=True)
class _LogNormal:
    mu: float
    sigma: float

    def __call__(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.mu, self.sigma)


@dataclass(frozen=True)
class RecordedRequest:
    n: int
    body: dict[str, Any]
    headers: dict[str, str]
    arrived: float  # time.monotonic() when the request was read
    started: float | None = None  # when it got a slot (= arrived without max_concurrency)
    answered: float | None = None  # when its answer was ready to send
    status: int | None = None  # the HTTP status answered (None: dropped, or still open)

    @property
    def service_s(self) -> float | None:
        """Seconds from arrival to answer, queueing, latency and hangs included."""
        return None if self.answered is None else self.answered - self.arrived


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """A request's prompt size in tokens, roughly: its messages and tools as JSON, four
    characters a token."""
    prompt = {k: body[k] for k in ("messages", "tools") if body.get(k) is not None}
    return len(json.dumps(prompt, ensure_ascii=False)) // CHARS_PER_TOKEN


class OpenAITestServer(LoopbackServer):
    def __init__(
        self,
        script: Script = (),
        *,
        default: Action = Reply(),
        latency_s: float | Callable[[], float] = 0.0,
        max_concurrency: int | None = None,
        overflow: Overflow = "queue",
        overflow_retry_after_s: float = 1.0,
        context_tokens: int | None = None,
        honour_max_tokens: bool = False,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if overflow not in ("queue", "reject"):
            raise ValueError(f"overflow must be 'queue' or 'reject', got {overflow!r}")
        self.script = script
        self.default = default
        self.latency_s = latency_s
        self.max_concurrency = max_concurrency
        self.overflow = overflow
        self.overflow_retry_after_s = overflow_retry_after_s
        self.context_tokens = context_tokens
        self.honour_max_tokens = honour_max_tokens
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.serving = 0
        self.max_serving = 0
        self.rejected = 0
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        super().__init__([
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/_test/requests", self._report, methods=["GET"]),
        ], name="openai-test-server")
        self.base_url = self.url("/v1")

    def arrival_gaps(self) -> list[float]:
        """Seconds between consecutive requests' arrivals."""
        times = [r.arrived for r in self.requests]
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    async def on_start(self) -> None:
        if self.max_concurrency is not None:
            self._slots = asyncio.Semaphore(self.max_concurrency)

    async def _report(self, request: Request) -> Response:
        """The records and counters as JSON, for a client in another process."""
        with self._lock:
            records = [asdict(r) for r in self.requests]
            counters = {"in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                        "serving": self.serving, "max_serving": self.max_serving,
                        "rejected": self.rejected}
        return JSONResponse({"requests": records, **counters})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            n = len(self.requests)
            self.requests.append(RecordedRequest(n, body, dict(request.headers), time.monotonic()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        response: Response | None = None
        try:
            if self._slots is not None and self.overflow == "reject" and self._slots.locked():
                with self._lock:
                    self.rejected += 1
                response = await self._perform(rate_limited(self.overflow_retry_after_s), body, n)
                return response
            async with self._slots if self._slots is not None else contextlib.nullcontext():
                response = await self._serve(body, n)
                return response
        finally:
            with self._lock:
                self.in_flight -= 1
                status = None if isinstance(response, _DroppedResponse) or response is None \
                    else response.status_code
                self.requests[n] = replace(self.requests[n], answered=time.monotonic(),
                                           status=status)

    async def _serve(self, body: dict[str, Any], n: int) -> Response:
        with self._lock:
            self.requests[n] = replace(self.requests[n], started=time.monotonic())
            self.serving += 1
            self.max_serving = max(self.max_serving, self.serving)
        try:
            action = self._action(body, n)
            latency = self.latency_s() if callable(self.latency_s) else self.latency_s
            await self.pause(latency)
            if self.context_tokens is not None:
                prompt = estimate_tokens(body)
                if prompt > self.context_tokens:
                    action = context_length_exceeded(self.context_tokens, prompt)
            return await self._perform(action, body, n)
        finally:
            with self._lock:
                self.serving -= 1

    def _action(self, body: dict[str, Any], n: int) -> Action:
        if callable(self.script):
            return self.script(body, n)
        return self.script[n] if n < len(self.script) else self.default

    async def _perform(self, action: Action, body: dict[str, Any], n: int) -> Response:
        match action:
            case Reply():
                if self.honour_max_tokens:
                    action = _within_max_tokens(action, body)
                return JSONResponse(_completion(action, body, n))
            case Fail(status=status, headers=headers, message=message):
                error = {"message": message, "type": action.type,
                         "param": action.param, "code": action.code or str(status)}
                return JSONResponse({"error": error}, status_code=status, headers=dict(headers))
            case Hang(seconds=seconds, then=then):
                await self.pause(seconds)
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


def _within_max_tokens(reply: Reply, body: Mapping[str, Any]) -> Reply:
    """``reply`` cut to the request's completion-token limit, if its content is longer."""
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if limit is None or reply.content is None:
        return reply
    keep = int(limit) * CHARS_PER_TOKEN
    if len(reply.content) <= keep:
        return reply
    return replace(reply, content=reply.content[:keep], finish_reason="length",
                   completion_tokens=int(limit))


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


class OpenAITestServerProcess(Startable):
    """:class:`OpenAITestServer` in a child process (spawned, so nothing of the parent's state is
    shared), with the same arguments. ``requests()`` and ``counters()`` read its records over
    HTTP; times are ``time.monotonic()``, which is one clock for all processes on Linux."""

    def __init__(self, script: Script = (), **options: Any) -> None:
        self._options = {"script": script, **options}
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve_in_child, args=(self._options, child),
                                        name="openai-test-server", daemon=True)
        self.port = 0
        self.base_url = ""

    def start(self, timeout_s: float = 60.0) -> OpenAITestServerProcess:
        self._process.start()
        try:
            if not self._conn.poll(timeout_s):
                raise EOFError
            self.port = self._conn.recv()
        except EOFError:
            self._process.kill()
            self._process.join()
            raise RuntimeError(f"test server process did not start (exit code "
                               f"{self._process.exitcode}; see its traceback above)") from None
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def stop(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send("stop")
            self._process.join(timeout=15)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()

    def _report(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_test/requests",
                                    timeout=60) as answer:
            return json.loads(answer.read())

    def requests(self) -> list[RecordedRequest]:
        return [RecordedRequest(**r) for r in self._report()["requests"]]

    def counters(self) -> dict[str, int]:
        """in_flight, max_in_flight, serving, max_serving and rejected, as the server has them."""
        report = self._report()
        return {k: v for k, v in report.items() if k != "requests"}


def _serve_in_child(options: dict[str, Any], conn: Connection) -> None:
    with OpenAITestServer(**options) as server:
        conn.send(server.port)
        with contextlib.suppress(EOFError):
            conn.recv()  # "stop", or the parent is gone
