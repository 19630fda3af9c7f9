"""The LLM gateway driving the openai provider against a real OpenAI-compatible HTTP server."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import BudgetConfig, LLMConfig, RoleConfig
from agentune.tasks.llm.cache import ResponseCache
from agentune.tasks.llm.errors import BudgetExceeded, EndpointUnreachable, GatewayError
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.openai_provider import retry_after_s
from agentune.tasks.llm.types import ChatRequest, ChatResult

from support.openai_server import Drop, Fail, Hang, Malformed, OpenAITestServer, Reply, rate_limited

KEY_ENV = "AGENTUNE_TEST_KEY"
KEY = "sk-test-7f3a9c1e5b2d4680"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def role_config(server: OpenAITestServer, **overrides: Any) -> RoleConfig:
    settings: dict[str, Any] = {
        "provider": "openai",
        "model": "test-model",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        **overrides,
    }
    return RoleConfig(**settings)


def gateway(
    server: OpenAITestServer,
    tmp_path: Path,
    *,
    cache: bool = False,
    budget: BudgetConfig | None = None,
    **role: Any,
) -> LLMGateway:
    config = LLMConfig(
        teacher=role_config(server, **role),
        cache=cache,
        cache_dir=str(tmp_path / "cache"),
        budget=budget or BudgetConfig(),
    )
    return LLMGateway(config)


def ask(text: str = "Name a tool.", **params: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **params)


def full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


# --- answers -----------------------------------------------------------------------------------


async def test_answer_and_usage_are_recorded(openai_server, tmp_path):
    srv = openai_server([Reply("hello", prompt_tokens=12, completion_tokens=3)])
    async with gateway(
        srv, tmp_path, price_input_per_1m=1.0, price_output_per_1m=2.0, default_max_tokens=64
    ) as gw:
        result = await gw.chat(
            "teacher", ask(temperature=0.2, top_p=0.9, top_k=5, seed=7, stop=["\n"]), stage="demo"
        )

    assert (result.content, result.finish_reason, result.model) == ("hello", "stop", "test-model")
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (12, 3)
    assert not result.cached
    sent = srv.requests[0]
    assert sent.body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "Name a tool."}],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 5,
        "seed": 7,
        "max_tokens": 64,
        "stop": ["\n"],
    }
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"  # the body is sent as bytes
    [row] = gw.usage_rows()
    assert row == {
        "stage": "demo",
        "role": "teacher",
        "requests": 1,
        "cached": 0,
        "retries": 0,
        "failures": 0,
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "cost": pytest.approx((12 * 1.0 + 3 * 2.0) / 1e6),
    }
    assert gw.usage_total()["prompt_tokens"] == 12


async def test_tool_calls_are_parsed(openai_server, tmp_path):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    srv = openai_server(
        [Reply(None, tool_calls=[{"name": "weather", "arguments": {"city": "Oslo"}}])]
    )
    async with gateway(srv, tmp_path) as gw:
        result = await gw.chat("teacher", ask(tools=tools, tool_choice="auto"), stage="demo")

    assert result.content is None
    assert result.finish_reason == "tool_calls"
    [call] = result.tool_calls
    assert (call.id, call.name, call.parsed_arguments()) == (
        "call_0_0",
        "weather",
        {"city": "Oslo"},
    )
    assert srv.requests[0].body["tools"] == tools
    assert srv.requests[0].body["tool_choice"] == "auto"


async def test_response_format_json_schema_is_passed_through(openai_server, tmp_path):
    response_format = {
        "type": "json_schema",
        "json_schema": {
            "name": "verdict",
            "schema": {"type": "object", "properties": {"score": {"type": "integer"}}},
            "strict": True,
        },
    }
    srv = openai_server([Reply('{"score": 4}')])
    async with gateway(srv, tmp_path) as gw:
        result = await gw.chat("teacher", ask(response_format=response_format), stage="judge")

    assert srv.requests[0].body["response_format"] == response_format
    assert result.parsed_content() == {"score": 4}


# --- retries -----------------------------------------------------------------------------------


async def test_rate_limit_waits_at_least_retry_after(openai_server, tmp_path):
    srv = openai_server([rate_limited(1), Reply("after the wait")])
    async with gateway(srv, tmp_path) as gw:
        result = await gw.chat("teacher", ask(), stage="demo")

    assert result.content == "after the wait"
    assert srv.arrival_gaps()[0] >= 1.0
    assert gw.usage_total()["retries"] == 1


async def test_retry_after_beyond_the_longest_backoff_fails_at_once(openai_server, tmp_path):
    srv = openai_server([rate_limited(3600), Reply("never asked")])
    async with gateway(srv, tmp_path, max_retry_after_s=30) as gw:
        with pytest.raises(EndpointUnreachable, match=r"after 3600 s.*max_retry_after_s = 30"):
            await gw.chat("teacher", ask(), stage="demo")
    assert len(srv.requests) == 1
    assert gw.usage_total()["failures"] == 1


async def test_server_errors_are_retried(openai_server, tmp_path):
    srv = openai_server([Fail(500), Fail(503), Reply("third time")])
    async with gateway(srv, tmp_path) as gw:
        result = await gw.chat("teacher", ask(), stage="demo")

    assert result.content == "third time"
    assert len(srv.requests) == 3
    total = gw.usage_total()
    assert (total["requests"], total["retries"], total["failures"]) == (1, 2, 0)


async def test_exhausted_retries_name_the_endpoint(openai_server, tmp_path):
    srv = openai_server(default=Fail(503))
    async with gateway(srv, tmp_path, max_retries=2) as gw:
        with pytest.raises(EndpointUnreachable) as caught:
            await gw.chat("teacher", ask(), stage="synthesize")

    message = str(caught.value)
    for part in ("teacher", "synthesize", "3 attempts", "test-model", srv.base_url, "503"):
        assert part in message
    assert len(srv.requests) == 3
    assert gw.usage_total()["failures"] == 1


async def test_nothing_listening_is_a_connection_failure_not_a_timeout(openai_server, tmp_path):
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = openai_server()
    config = LLMConfig(teacher=role_config(srv, base_url=f"http://127.0.0.1:{port}/v1",
                                           max_retries=1, timeout_s=30),
                       cache=False, cache_dir=str(tmp_path / "cache"))
    started = time.monotonic()
    async with LLMGateway(config) as gw:
        with pytest.raises(EndpointUnreachable, match=rf"127.0.0.1:{port}/v1.*connection failed"):
            await gw.chat("teacher", ask(), stage="demo")
    assert time.monotonic() - started < 10  # refused at once, not after the 30 s timeout


async def test_hung_server_times_out_and_is_retried(openai_server, tmp_path):
    srv = openai_server(default=Hang(10))
    started = time.monotonic()
    async with gateway(srv, tmp_path, timeout_s=0.5, max_retries=1) as gw:
        with pytest.raises(GatewayError, match=r"2 attempts.*no answer within 0.5 s"):
            await gw.chat("teacher", ask(), stage="demo")

    assert len(srv.requests) == 2
    assert time.monotonic() - started < 3


async def test_broken_responses_are_retried(openai_server, tmp_path):
    no_choices = Malformed(json.dumps({"id": "x", "object": "chat.completion", "choices": []}))
    srv = openai_server(
        [Malformed(), no_choices, Malformed("oops", content_type="text/plain"), Drop()]
    )
    async with gateway(srv, tmp_path, max_retries=4) as gw:
        result = await gw.chat("teacher", ask(), stage="demo")

    assert result.content == "ok"
    assert len(srv.requests) == 5
    assert gw.usage_total()["retries"] == 4


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(openai_server, tmp_path, status):
    # Some servers echo the key in their error message; it must not travel on.
    srv = openai_server(default=Fail(status, message=f"Incorrect API key provided: {KEY}"))
    async with gateway(srv, tmp_path) as gw:
        with pytest.raises(GatewayError) as caught:
            await gw.chat("teacher", ask(), stage="demo")

    assert len(srv.requests) == 1
    message = str(caught.value)
    assert f"HTTP {status}" in message and srv.base_url in message and "test-model" in message
    assert KEY not in full_text(caught.value)
    assert gw.usage_total()["failures"] == 1


def test_retry_after_headers():
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= retry_after_s({"retry-after": later}) <= 30
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


async def test_backstop_stops_a_provider_that_ignores_its_timeout(tmp_path):
    class Silent:
        name, model = "silent", "never"

        async def complete(self, request: ChatRequest) -> ChatResult:
            await asyncio.sleep(60)
            raise AssertionError("unreachable")

        async def aclose(self) -> None:
            pass

    config = LLMConfig(teacher=RoleConfig(timeout_s=0.1, max_retries=0), cache=False)
    async with LLMGateway(config, providers={"teacher": Silent()}) as gw:
        with pytest.raises(GatewayError, match="gateway backstop"):
            await gw.chat("teacher", ask(), stage="demo")


# --- the API key -------------------------------------------------------------------------------


async def test_missing_key_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV)
    config = LLMConfig(
        teacher=RoleConfig(
            provider="openai",
            model="gpt-x",
            base_url="https://llm.example.com/v1",
            api_key_env=KEY_ENV,
        ),
        cache=False,
    )
    async with LLMGateway(config) as gw:
        with pytest.raises(GatewayError, match=f"{KEY_ENV} is not set"):
            await gw.chat("teacher", ask(), stage="demo")


async def test_loopback_server_needs_no_key(monkeypatch, openai_server, tmp_path):
    monkeypatch.delenv(KEY_ENV)
    srv = openai_server()
    async with gateway(srv, tmp_path) as gw:
        assert (await gw.chat("teacher", ask(), stage="demo")).content == "ok"
    assert srv.requests[0].headers["authorization"] == "Bearer EMPTY"


# --- the response cache ------------------------------------------------------------------------


async def test_cache_answers_repeats_and_survives_a_new_gateway(openai_server, tmp_path):
    srv = openai_server(lambda body, n: Reply(f"answer to {body['messages'][0]['content']}"))
    async with gateway(srv, tmp_path, cache=True) as gw:
        first = [await gw.chat("teacher", ask(f"q{i}"), stage="demo") for i in range(3)]
        again = await gw.chat("teacher", ask("q0"), stage="demo")
    assert len(srv.requests) == 3
    assert again.cached and again.content == first[0].content == "answer to q0"

    async with gateway(srv, tmp_path, cache=True) as gw:
        rerun = [await gw.chat("teacher", ask(f"q{i}"), stage="demo") for i in range(3)]
        assert gw.usage_total() | {"cost": 0.0} == {
            "stage": "all", "role": "all", "requests": 3, "cached": 3, "retries": 0,
            "failures": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0,
        }  # fmt: skip
    assert len(srv.requests) == 3
    assert [r.content for r in rerun] == [r.content for r in first]
    assert all(r.cached for r in rerun)


async def test_an_answer_paid_under_the_old_key_format_is_not_paid_again(openai_server,
                                                                         tmp_path):
    import sqlite3

    srv = openai_server()
    request = ask("q-old", max_tokens=64)
    (tmp_path / "cache").mkdir()
    with sqlite3.connect(tmp_path / "cache" / "responses.sqlite") as db:  # a format-1 file
        db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, role TEXT NOT NULL, "
                   "result TEXT NOT NULL, created_at REAL NOT NULL)")
        db.execute("INSERT INTO responses VALUES (?, 'teacher', ?, 1.0)",
                   (request.legacy_cache_key("openai", "test-model"),
                    ChatResult(content="paid before").model_dump_json(exclude={"cached"})))
    async with gateway(srv, tmp_path, cache=True) as gw:
        result = await gw.chat("teacher", request, stage="demo")
    assert result.cached and result.content == "paid before"
    assert srv.requests == []
    with sqlite3.connect(tmp_path / "cache" / "responses.sqlite") as db:  # copied under the new
        copied = db.execute("SELECT result FROM responses WHERE key = ?",
                            (str(request.cache_key("openai", "test-model")),)).fetchone()
    assert copied is not None and "paid before" in copied[0]


async def test_identical_requests_in_flight_are_paid_once(openai_server, tmp_path):
    srv = openai_server(latency_s=0.2)
    async with gateway(srv, tmp_path, cache=True) as gw:
        results = await asyncio.gather(*(gw.chat("teacher", ask(), stage="demo") for _ in range(5)))
    assert len(srv.requests) == 1
    assert sorted(r.cached for r in results) == [False] + [True] * 4


async def test_failures_are_not_cached(openai_server, tmp_path):
    srv = openai_server([Fail(400), Reply("second try")])
    async with gateway(srv, tmp_path, cache=True) as gw:
        with pytest.raises(GatewayError):
            await gw.chat("teacher", ask(), stage="demo")
        result = await gw.chat("teacher", ask(), stage="demo")
    assert result.content == "second try" and not result.cached
    assert len(srv.requests) == 2
    cache = ResponseCache(tmp_path / "cache" / "responses.sqlite")
    assert len(cache) == 1
    cache.close()


# --- budget and limits -------------------------------------------------------------------------


async def test_token_budget_stops_further_calls(openai_server, tmp_path):
    srv = openai_server(default=Reply(prompt_tokens=10, completion_tokens=5))
    async with gateway(srv, tmp_path, cache=True, budget=BudgetConfig(max_tokens=40)) as gw:
        # Each call reserves its worst case: the prompt (11 tokens estimated) + max_tokens 5.
        await gw.chat("teacher", ask("a", max_tokens=5), stage="demo")
        await gw.chat("teacher", ask("b", max_tokens=5), stage="demo")  # 15 + 16 <= 40
        with pytest.raises(BudgetExceeded) as caught:  # 30 + 16 > 40
            await gw.chat("teacher", ask("c", max_tokens=5), stage="build_templates")
        # Cached answers cost nothing and are still served.
        assert (await gw.chat("teacher", ask("a", max_tokens=5), stage="demo")).cached
    assert len(srv.requests) == 2
    message = str(caught.value)
    for part in ("30 tokens spent", "max_tokens = 40", "teacher", "build_templates",
                 "this call may use up to 16"):
        assert part in message


async def test_a_call_whose_worst_case_passes_the_cap_is_not_sent(openai_server, tmp_path):
    srv = openai_server(default=Reply(prompt_tokens=10, completion_tokens=5))
    async with gateway(srv, tmp_path, budget=BudgetConfig(max_tokens=100)) as gw:
        with pytest.raises(BudgetExceeded, match="more than the whole cap"):
            await gw.chat("teacher", ask(), stage="demo")  # default_max_tokens 512
    assert srv.requests == []


async def test_cost_budget_stops_further_calls(openai_server, tmp_path):
    srv = openai_server(default=Reply(prompt_tokens=1000, completion_tokens=0))
    budget = BudgetConfig(max_cost=0.00105)  # a call reserves 0.000111 (111 tokens)
    async with gateway(srv, tmp_path, budget=budget, price_input_per_1m=1.0,
                       price_output_per_1m=1.0) as gw:
        await gw.chat("teacher", ask(max_tokens=100), stage="demo")  # 0.001 spent
        with pytest.raises(BudgetExceeded, match="cost budget"):
            await gw.chat("teacher", ask(max_tokens=100), stage="demo")
    assert len(srv.requests) == 1


async def test_calls_in_flight_cannot_together_pass_the_cap(openai_server, tmp_path):
    # Without reservations all ten would pass a check made while nothing was spent yet.
    srv = openai_server(default=Reply(prompt_tokens=10, completion_tokens=50), latency_s=0.3)
    budget = BudgetConfig(max_tokens=240)
    async with gateway(srv, tmp_path, budget=budget, max_concurrency=10) as gw:
        results = await asyncio.gather(
            *(gw.chat("teacher", ask(f"q{i}", max_tokens=50), stage="demo") for i in range(10)),
            return_exceptions=True)
        spent = gw.budget.spent()
    answered = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(answered) + len(refused) == 10
    # Worst case 50 + 12 prompt tokens: three fit in 240, the fourth's reservation would not.
    assert len(answered) == len(srv.requests) == 3
    assert spent.tokens == 3 * 60 <= 240 and spent.reserved_tokens == 0


def named_gateway(server, tmp_path, run: str, **budget: Any) -> LLMGateway:
    config = LLMConfig(teacher=role_config(server), cache=False,
                       cache_dir=str(tmp_path / "cache"), budget=BudgetConfig(**budget))
    return LLMGateway(config, run=run)


async def test_a_runs_spend_survives_its_process_and_ends_with_the_run(openai_server, tmp_path):
    srv = openai_server(default=Reply(prompt_tokens=10, completion_tokens=5))
    async with named_gateway(srv, tmp_path, "demo/synthesize", max_tokens=100) as gw:
        for i in range(4):
            await gw.chat("teacher", ask(f"q{i}", max_tokens=5), stage="synthesize")
    assert (tmp_path / "cache" / "ledger.sqlite").is_file()
    # Started again (a resume): the sum continues, so the cap counts the first process's spend.
    async with named_gateway(srv, tmp_path, "demo/synthesize", max_tokens=100) as gw:
        assert gw.budget.spent().tokens == 60
        await gw.chat("teacher", ask("q4", max_tokens=5), stage="synthesize")
        await gw.chat("teacher", ask("q5", max_tokens=5), stage="synthesize")
        with pytest.raises(BudgetExceeded, match="90 tokens spent by run 'demo/synthesize'"):
            await gw.chat("teacher", ask("q6", max_tokens=5), stage="synthesize")
        assert gw.usage_total()["prompt_tokens"] == 20  # this process's own counters
    # Another run name has its own budget; a finished run's successor starts at zero.
    async with named_gateway(srv, tmp_path, "other/synthesize", max_tokens=100) as gw:
        assert gw.budget.spent().tokens == 0
    async with named_gateway(srv, tmp_path, "demo/synthesize", max_tokens=100) as gw:
        gw.finish_run()
    async with named_gateway(srv, tmp_path, "demo/synthesize", max_tokens=100) as gw:
        assert gw.budget.spent().tokens == 0


async def test_reservations_of_a_killed_process_count_as_spent(openai_server, tmp_path):
    import sqlite3
    import subprocess
    import sys

    srv = openai_server(default=Reply(prompt_tokens=10, completion_tokens=5))
    async with named_gateway(srv, tmp_path, "demo/pipeline", max_tokens=1000) as gw:
        await gw.chat("teacher", ask("q", max_tokens=5), stage="synthesize")
        gw.budget.reserve("synthesize", "teacher", 300, 0.0, "test")
        run_id = gw.budget.run_id
    # A reservation left by a process that is gone (as after a kill -9 mid-call).
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    with sqlite3.connect(tmp_path / "cache" / "ledger.sqlite") as db:
        db.execute("UPDATE reservations SET pid = ? WHERE run = ?", (int(dead.stdout), run_id))
    async with named_gateway(srv, tmp_path, "demo/pipeline", max_tokens=1000) as gw:
        spent = gw.budget.spent()
        assert gw.budget.reclaimed == 1
        assert (spent.tokens, spent.reserved_tokens) == (315, 0)
        assert any("in flight at a kill" in row["stage"] for row in gw.budget.rows())


def test_a_cost_cap_needs_prices_on_every_endpoint_role(openai_server):
    srv = openai_server()
    with pytest.raises(ValueError, match=r"llm.budget.max_cost is set, but llm.judge \(provider "
                                         r"openai, model 'test-model'\) has no price_output_per_1m"):
        LLMConfig(teacher=role_config(srv, price_input_per_1m=1, price_output_per_1m=2),
                  judge=role_config(srv, price_input_per_1m=1),
                  budget=BudgetConfig(max_cost=10))
    # Free endpoints say so; local roles cost nothing; no cap, no requirement.
    LLMConfig(teacher=role_config(srv, price_input_per_1m=0, price_output_per_1m=0),
              budget=BudgetConfig(max_cost=10))
    LLMConfig(teacher=role_config(srv), budget=BudgetConfig(max_tokens=10))


async def test_concurrency_limit_is_respected(openai_server, tmp_path):
    srv = openai_server(latency_s=0.15)
    async with gateway(srv, tmp_path, max_concurrency=3) as gw:
        await asyncio.gather(*(gw.chat("teacher", ask(f"q{i}"), stage="demo") for i in range(10)))
    assert len(srv.requests) == 10
    assert srv.max_in_flight == 3


async def test_requests_per_minute_spreads_requests(openai_server, tmp_path):
    srv = openai_server()
    async with gateway(srv, tmp_path, requests_per_minute=120) as gw:  # 2 per second
        start = time.monotonic()  # the server's clock too: CLOCK_MONOTONIC is system-wide
        await asyncio.gather(*(gw.chat("teacher", ask(f"q{i}"), stage="demo") for i in range(5)))
    # A bucket of one second (2 requests) goes at once, then one request every 0.5 s. Measured
    # from the start: a busy machine may delay early sends (bunching arrivals), never the limiter.
    assert max(r.arrived for r in srv.requests) - start >= 1.4


async def test_token_limiter_admits_requests_larger_than_its_rate(openai_server, tmp_path):
    srv = openai_server()
    async with gateway(srv, tmp_path, tokens_per_minute=100, default_max_tokens=500) as gw:
        await asyncio.wait_for(gw.chat("teacher", ask(), stage="demo"), 5)
    assert len(srv.requests) == 1


async def test_tokens_per_minute_spreads_requests(openai_server, tmp_path):
    srv = openai_server()
    # 1,000 tokens a second, a bucket of one second: ~510-token requests, two at once, then one
    # every ~0.5 s.
    async with gateway(srv, tmp_path, tokens_per_minute=60_000) as gw:
        start = time.monotonic()
        await asyncio.gather(*(gw.chat("teacher", ask(f"q{i}", max_tokens=500), stage="demo")
                               for i in range(6)))
    arrivals = sorted(r.arrived for r in srv.requests)
    assert arrivals[1] - arrivals[0] < 0.3
    assert arrivals[-1] - start >= 1.8


async def test_tokens_per_minute_counts_chinese_by_characters(openai_server, tmp_path):
    srv = openai_server()
    chinese = "请帮我查一下北京明天的天气，然后告诉我需要带伞吗。" * 16  # 400 characters
    # ~415 tokens each: the bucket (1,000) takes two, the other three wait ~1.2 s. Counted as
    # characters / 4 (~115 each) all five would go at once.
    async with gateway(srv, tmp_path, tokens_per_minute=60_000) as gw:
        start = time.monotonic()
        await asyncio.gather(*(gw.chat("teacher", ask(f"{i}{chinese}", max_tokens=1),
                                       stage="demo") for i in range(5)))
    assert max(r.arrived for r in srv.requests) - start >= 0.9


async def test_token_rate_limiter_on_a_fake_clock():
    from agentune.tasks.llm.gateway import TokenRateLimiter

    now = [0.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = TokenRateLimiter(600, clock=lambda: now[0])  # 10 tokens/s, bucket 10
    original = asyncio.sleep
    asyncio.sleep = fake_sleep  # type: ignore[assignment]
    try:
        await limiter.acquire(5)
        await limiter.acquire(5)
        assert now[0] == 0.0  # the bucket's worth goes at once
        await limiter.acquire(50)  # larger than the bucket: waits until it is empty ...
        assert now[0] == pytest.approx(1.0)
        await limiter.acquire(1)  # ... and is counted whole: the next waits for it to drain
        assert now[0] == pytest.approx(1.0 + 4.1)
    finally:
        asyncio.sleep = original  # type: ignore[assignment]
    assert len(slept) == 2


def test_prompt_estimates_count_cjk_characters_and_local_roles_use_their_tokenizer():
    from transformers import AutoTokenizer

    from agentune.tasks.llm.embedded_model import resolve_model_path
    from agentune.tasks.llm.tokens import PromptCounter, estimate_tokens, prompt_text

    english = "What will the weather be like in Beijing tomorrow?"
    chinese = "请帮我查一下北京明天的天气，然后告诉我需要带伞吗。"
    assert estimate_tokens(english) == len(english) // 4 + 1
    assert estimate_tokens(chinese) == len(chinese)  # ~3x more than characters / 4
    assert estimate_tokens("日本語のテキスト") == 8 and estimate_tokens("한국어") == 3
    request = ask(chinese)
    local = PromptCounter(RoleConfig(provider="local", model="embedded"), local=True)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    exact = len(tokenizer(prompt_text(request), add_special_tokens=False)["input_ids"])
    assert local.count(request) == exact > estimate_tokens(prompt_text(request))


def test_roles_configured_alike_share_a_provider(openai_server, tmp_path):
    srv = openai_server()
    same = role_config(srv)
    config = LLMConfig(
        teacher=same, judge=same.model_copy(), student=role_config(srv, model="other")
    )
    gw = LLMGateway(config)
    assert gw.provider("teacher") is gw.provider("judge")
    assert gw.provider("student") is not gw.provider("teacher")
    asyncio.run(gw.aclose())
