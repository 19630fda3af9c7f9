"""The latency-simulating test server itself: latency distributions, its concurrency limit in
both overflow modes, the token limits, the fault helpers, per-request timings and the
child-process variant. Fast: short latencies, a handful of requests."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from support.openai_server import (
    Latency,
    OpenAITestServer,
    OpenAITestServerProcess,
    Reply,
    estimate_tokens,
    truncated,
    unavailable,
    unknown_tool_call,
    wrong_schema,
)

Start = Callable[..., OpenAITestServer]


def body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


async def post_all(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """All at once: they arrive in any order."""
    async with httpx.AsyncClient(timeout=30) as client:
        return list(await asyncio.gather(
            *(client.post(f"{url}/chat/completions", json=b) for b in bodies)))


async def post_in_turn(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """One after the other: the n-th body is the server's request n."""
    async with httpx.AsyncClient(timeout=30) as client:
        return [await client.post(f"{url}/chat/completions", json=b) for b in bodies]


def test_latency_distributions_are_seeded_and_shaped() -> None:
    assert [Latency.fixed(0.2)() for _ in range(3)] == [0.2, 0.2, 0.2]
    first, again = Latency.uniform(0.1, 0.3, seed=1), Latency.uniform(0.1, 0.3, seed=1)
    assert [first() for _ in range(5)] == [again() for _ in range(5)]
    assert all(0.1 <= again() <= 0.3 for _ in range(1000))
    draw = Latency.lognormal(median_s=0.2, p99_s=1.0, seed=7)
    samples = sorted(draw() for _ in range(40_000))
    assert statistics.median(samples) == pytest.approx(0.2, rel=0.03)
    assert samples[int(0.99 * len(samples))] == pytest.approx(1.0, rel=0.08)
    with pytest.raises(ValueError, match="median <= p99"):
        Latency.lognormal(median_s=1.0, p99_s=0.5)


def test_queue_mode_serves_at_most_max_concurrency(openai_server: Start) -> None:
    server = openai_server(latency_s=Latency.fixed(0.2), max_concurrency=2)
    start = time.monotonic()
    answers = asyncio.run(post_all(server.base_url, [body(str(i)) for i in range(6)]))
    elapsed = time.monotonic() - start
    assert [a.status_code for a in answers] == [200] * 6
    assert server.max_serving == 2 and server.max_in_flight == 6 and server.rejected == 0
    assert elapsed >= 0.6  # three waves of two
    waits = sorted(r.started - r.arrived for r in server.requests)
    assert waits[-1] >= 0.35 and all(r.service_s >= 0.2 for r in server.requests)


def test_reject_mode_answers_the_excess_with_429_and_retry_after(openai_server: Start) -> None:
    server = openai_server(latency_s=0.3, max_concurrency=1, overflow="reject",
                           overflow_retry_after_s=2)
    answers = asyncio.run(post_all(server.base_url, [body(str(i)) for i in range(3)]))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 429, 429] and server.rejected == 2
    rejected = [a for a in answers if a.status_code == 429]
    assert all(a.headers["retry-after"] == "2" for a in rejected)
    assert {r.status for r in server.requests} == {200, 429}


def test_context_limit_answers_openai_s_400(openai_server: Start) -> None:
    server = openai_server(context_tokens=50)
    short, long = asyncio.run(post_all(server.base_url, [body("x" * 40), body("x" * 400)]))
    assert short.status_code == 200
    assert long.status_code == 400
    error = long.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error" and error["param"] == "messages"
    assert f"resulted in {estimate_tokens(body('x' * 400))} tokens" in error["message"]


def test_max_tokens_cuts_the_reply_with_finish_reason_length(openai_server: Start) -> None:
    server = openai_server(default=Reply("y" * 100), honour_max_tokens=True)
    cut, whole, newer = asyncio.run(post_all(server.base_url, [
        body(max_tokens=5), body(max_tokens=100), body(max_completion_tokens=3)]))
    choice = cut.json()["choices"][0]
    assert choice["message"]["content"] == "y" * 20 and choice["finish_reason"] == "length"
    assert cut.json()["usage"]["completion_tokens"] == 5
    assert whole.json()["choices"][0]["finish_reason"] == "stop"
    assert newer.json()["choices"][0]["message"]["content"] == "y" * 12


def test_fault_helpers(openai_server: Start) -> None:
    server = openai_server([unavailable(retry_after_s=1.5), truncated("abcdef", 3),
                            wrong_schema(), unknown_tool_call("teleport", {"to": "mars"})])
    busy, cut, schema, tool = asyncio.run(post_in_turn(server.base_url, [body()] * 4))
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1.5"
    assert cut.json()["choices"][0] == {
        "index": 0, "message": {"role": "assistant", "content": "abc"}, "finish_reason": "length"}
    assert json.loads(schema.json()["choices"][0]["message"]["content"]) == {"unexpected": "field"}
    call = tool.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call == {"name": "teleport", "arguments": '{"to": "mars"}'}


def test_server_in_a_child_process_reports_its_records() -> None:
    with OpenAITestServerProcess([Reply("first")], latency_s=Latency.fixed(0.05),
                                 max_concurrency=4) as server:
        answers = asyncio.run(post_all(server.base_url, [body("a"), body("b")]))
        records = server.requests()
        counters = server.counters()
    assert sorted(a.json()["choices"][0]["message"]["content"] for a in answers) == ["first", "ok"]
    assert sorted(r.body["messages"][0]["content"] for r in records) == ["a", "b"]
    assert all(r.status == 200 and r.service_s is not None and r.service_s >= 0.05
               for r in records)
    assert counters["max_serving"] == 2 and counters["in_flight"] == 0
