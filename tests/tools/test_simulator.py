"""Simulated tools: the teacher plays the API through the gateway, the same call gets the same
answer from one teacher request, and injected errors are deterministic per call."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import BudgetConfig, LLMConfig, RoleConfig
from agentune.config.tools import SimulationConfig, ToolsConfig
from agentune.tasks.llm.errors import BudgetExceeded, ModelUnavailable
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import ToolContext
from agentune.tasks.tools.simulator import (
    MAX_ITEMS,
    MAX_STRING_CHARS,
    SimulationMemory,
    build_simulation_request,
    injected_error,
    simulation_schema,
)

from support.openai_server import Fail, OpenAITestServer, Reply

KEY_ENV = "AGENTUNE_TEST_KEY"
CATALOG = {tool.name: tool for tool in load_tool_catalog("data/demo/tools.yaml")}
NOW = dt.datetime(2025, 6, 2, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=8)))
CONTEXT = ToolContext(stage="test", now=NOW)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-0000")


def weather_api(body: dict[str, Any], n: int) -> Reply:
    """A scripted teacher: a weather report for the location in the call's arguments."""
    user = body["messages"][1]["content"]
    arguments = json.loads(user.split("Call arguments:\n", 1)[1].split("\n\n", 1)[0])
    response = {"location": arguments.get("location"), "forecast": [{"high_c": 20 + n}]}
    return Reply(json.dumps({"error": "", "response": response}))


def gateway(server: OpenAITestServer, tmp_path: Path, **llm: Any) -> LLMGateway:
    teacher = RoleConfig(
        provider="openai",
        model="teacher-model",
        base_url=server.base_url,
        api_key_env=KEY_ENV,
        max_retries=0,
    )
    return LLMGateway(LLMConfig(teacher=teacher, cache_dir=str(tmp_path / "cache"), **llm))


def executor(gw: LLMGateway, *, error_rate: float = 0.0, seed: int = 0) -> ToolExecutor:
    config = ToolsConfig(simulation=SimulationConfig(error_rate=error_rate, seed=seed))
    return ToolExecutor([CATALOG["get_weather"], CATALOG["stock_quote"]], config, gateway=gw)


async def test_same_call_same_answer_from_one_teacher_request(openai_server, tmp_path) -> None:
    srv = openai_server(weather_api)
    async with gateway(srv, tmp_path) as gw:
        tools = executor(gw)
        first = await tools.execute("get_weather", {"location": "Chengdu"}, context=CONTEXT)
        again = await tools.execute("get_weather", {"location": "Chengdu"}, context=CONTEXT)
        spelled_out = await tools.execute(
            "get_weather", {"location": "Chengdu", "days": 1, "units": "metric"}, context=CONTEXT
        )
        together = await asyncio.gather(
            *(
                tools.execute("get_weather", {"location": "Chengdu"}, context=CONTEXT)
                for _ in range(3)
            )
        )
    assert first.ok and first.kind == "simulated" and not first.cached
    assert json.loads(first.content) == {"location": "Chengdu", "forecast": [{"high_c": 20}]}
    assert len(srv.requests) == 1
    for obs in (again, spelled_out, *together):
        assert obs.content == first.content and obs.cached
    # A later run (a new gateway on the same cache) asks the teacher nothing either.
    async with gateway(srv, tmp_path) as gw:
        rerun = await executor(gw).execute("get_weather", {"location": "Chengdu"}, context=CONTEXT)
    assert rerun.content == first.content and len(srv.requests) == 1
    # Other arguments are another call.
    async with gateway(srv, tmp_path) as gw:
        other = await executor(gw).execute("get_weather", {"location": "Lhasa"}, context=CONTEXT)
    assert '"Lhasa"' in other.content and len(srv.requests) == 2


async def test_request_is_deterministic_structured_and_documents_the_call(openai_server, tmp_path):
    srv = openai_server(weather_api)
    async with gateway(srv, tmp_path) as gw:
        await executor(gw).execute("get_weather", {"location": "成都", "days": 3}, context=CONTEXT)
    body = srv.requests[0].body
    assert body["temperature"] == 0 and isinstance(body["seed"], int)
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "api_response"
    assert fmt["json_schema"]["schema"]["required"] == ["response"]
    assert list(fmt["json_schema"]["schema"]["properties"]) == ["response", "error"]
    system, user = body["messages"]
    assert system["role"] == "system" and "JSON only" in system["content"]
    content = user["content"]
    assert "API function: get_weather" in content
    assert (
        '"days":3' in content and '"location":"成都"' in content and '"units":"metric"' in content
    )
    assert "Today is 2025-06-02 (Monday)." in content
    assert CATALOG["get_weather"].description in content
    # The same call rendered twice is the same request; another seed is another request.
    config = SimulationConfig()
    args = {"location": "成都", "days": 3, "units": "metric"}
    one = build_simulation_request(CATALOG["get_weather"], args, today=NOW.date(), config=config)
    two = build_simulation_request(
        CATALOG["get_weather"], dict(reversed(list(args.items()))), today=NOW.date(), config=config
    )
    salted = build_simulation_request(
        CATALOG["get_weather"], args, today=NOW.date(), config=SimulationConfig(seed=1)
    )
    assert one.cache_key("openai", "m") == two.cache_key("openai", "m")
    assert salted.cache_key("openai", "m") != one.cache_key("openai", "m")


async def test_injected_errors_are_per_call_and_cost_no_teacher_call(openai_server, tmp_path):
    srv = openai_server(weather_api)
    cities = [f"City{i}" for i in range(40)]
    async with gateway(srv, tmp_path) as gw:
        tools = executor(gw, error_rate=0.5)
        first = [
            await tools.execute("get_weather", {"location": c}, context=CONTEXT) for c in cities
        ]
        second = [
            await tools.execute("get_weather", {"location": c}, context=CONTEXT) for c in cities
        ]
    failed = [o for o in first if not o.ok]
    assert 10 <= len(failed) <= 30
    assert [o.ok for o in first] == [o.ok for o in second]
    assert [o.content for o in first] == [o.content for o in second]
    for obs in failed:
        assert obs.error_kind == "api_error" and obs.injected_error
        error = json.loads(obs.content)
        assert error["status"] in (429, 500, 503, 504) and error["error"]
    assert len(srv.requests) == len(first) - len(failed)
    config = SimulationConfig(error_rate=0.5)
    drawn = [
        injected_error(config, "get_weather", {"location": c, "days": 1, "units": "metric"})
        for c in cities
    ]
    assert [d is not None for d in drawn] == [not o.ok for o in first]


async def test_error_rate_extremes(openai_server, tmp_path) -> None:
    srv = openai_server(weather_api)
    async with gateway(srv, tmp_path) as gw:
        always = await executor(gw, error_rate=1.0).execute(
            "stock_quote", {"symbol": "AAPL"}, context=CONTEXT
        )
        never = await executor(gw, error_rate=0.0).execute(
            "stock_quote", {"symbol": "AAPL"}, context=CONTEXT
        )
    assert always.injected_error and always.error_kind == "api_error"
    assert never.ok and len(srv.requests) == 1


async def test_teacher_reported_api_error_is_not_injected(openai_server, tmp_path) -> None:
    answer = {"error": "Unknown symbol: ZZZZ", "response": {}}
    srv = openai_server([Reply(json.dumps(answer))])
    async with gateway(srv, tmp_path) as gw:
        obs = await executor(gw).execute("stock_quote", {"symbol": "ZZZZ"}, context=CONTEXT)
    assert (obs.ok, obs.error_kind, obs.injected_error) == (False, "api_error", False)
    assert json.loads(obs.content) == {"error": "Unknown symbol: ZZZZ"}


@pytest.mark.parametrize(
    "content",
    ["not json", '{"error": 3, "response": {}}', '{"response": [1, 2]}', '["a"]', "{}", '{"x": 1}'],
)
async def test_unreadable_teacher_answer_is_a_simulator_failure(openai_server, tmp_path, content):
    srv = openai_server([Reply(content)])
    async with gateway(srv, tmp_path) as gw:
        obs = await executor(gw).execute("stock_quote", {"symbol": "AAPL"}, context=CONTEXT)
    assert obs.error_kind == "simulator_failure" and "unreadable answer" in obs.content


async def test_teacher_unreachable_is_simulator_unavailable(openai_server, tmp_path) -> None:
    srv = openai_server([Fail(500)], default=Fail(500))
    async with gateway(srv, tmp_path) as gw:
        obs = await executor(gw).execute("stock_quote", {"symbol": "AAPL"}, context=CONTEXT)
    assert obs.error_kind == "simulator_unavailable" and "got no answer" in obs.content


async def test_teacher_refusing_the_request_is_a_simulator_failure(openai_server, tmp_path) -> None:
    srv = openai_server([Fail(400)], default=Fail(400))
    async with gateway(srv, tmp_path) as gw:
        obs = await executor(gw).execute("stock_quote", {"symbol": "AAPL"}, context=CONTEXT)
    assert obs.error_kind == "simulator_failure" and "got no answer" in obs.content


async def test_budget_exceeded_propagates(openai_server, tmp_path) -> None:
    srv = openai_server(weather_api)
    async with gateway(srv, tmp_path, budget=BudgetConfig(max_tokens=1)) as gw:
        tools = executor(gw)
        # Not an observation: the simulated call's worst case is over the cap, and the run stops.
        with pytest.raises(BudgetExceeded):
            await tools.execute("get_weather", {"location": "Bergen"}, context=CONTEXT)
    assert srv.requests == []


async def test_an_unloadable_local_teacher_stops_the_run(tmp_path) -> None:
    """Not a tool error for the agent to read: no simulated call of the run could succeed."""
    teacher = RoleConfig(provider="local", model=str(tmp_path / "no-such-model"))
    async with LLMGateway(LLMConfig(teacher=teacher, cache_dir=str(tmp_path / "cache"))) as gw:
        with pytest.raises(ModelUnavailable, match="no-such-model"):
            await executor(gw).execute("get_weather", {"location": "Bergen"}, context=CONTEXT)


async def test_today_follows_the_pinned_clock(openai_server, tmp_path) -> None:
    srv = openai_server(weather_api)
    pinned = dt.datetime(2031, 1, 7, 23, 0, tzinfo=dt.UTC)
    config = ToolsConfig(now=pinned, simulation=SimulationConfig(error_rate=0))
    async with gateway(srv, tmp_path) as gw:
        tools = ToolExecutor([CATALOG["get_weather"]], config, gateway=gw)
        await tools.execute("get_weather", {"location": "Rome"})
        await tools.execute("get_weather", {"location": "Rome"}, context=CONTEXT)
    dates = [
        re.search(r"Today is (\S+)", r.body["messages"][1]["content"]).group(1)
        for r in srv.requests
    ]
    assert dates == ["2031-01-07", "2025-06-02"]


def test_answer_schema_bounds_size_and_depth() -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(simulation_schema(300))
    realistic = {
        "response": {
            "location": "Chengdu",
            "forecast": [
                {"date": "2025-06-02", "high_c": 28, "hourly_c": [20, 22, 25], "rain": True},
                {"date": "2025-06-03", "wind": {"speed_kmh": 12, "direction": "NE"}},
            ],
            "air_quality": {"aqi": 63, "level": "good"},
        }
    }
    assert validator.is_valid(realistic)
    assert validator.is_valid({"response": {}, "error": "Unknown flight id"})
    too_deep = {"response": {"flights": [{"segments": [{"from": "PEK"}]}]}}
    too_long = {"response": {"text": "x" * (MAX_STRING_CHARS + 1)}}
    too_many = {"response": {"items": list(range(MAX_ITEMS + 1))}}
    for answer in (too_deep, too_long, too_many, {"error": "no response"}):
        assert not validator.is_valid(answer)


def test_memory_adds_the_world_and_history_and_leaves_the_stateless_prompt_alone() -> None:
    tool = CATALOG["get_weather"]
    plain = build_simulation_request(tool, {"location": "Oslo"}, today=dt.date(2025, 6, 2),
                                     config=SimulationConfig())
    user = plain.messages[1]["content"]
    # The stateless prompt (and so every cached answer) is what it was before memory existed.
    assert "\n\nToday is 2025-06-02 (Monday).\n\nCall arguments:\n" in user
    assert "Earlier calls" not in user and '"state"' not in json.dumps(plain.response_format)
    memory = SimulationMemory({"stations": ["Oslo"]}, [("get_weather", {"location": "Bergen"},
                                                        {"high_c": 14})])
    stateful = build_simulation_request(tool, {"location": "Oslo"}, today=dt.date(2025, 6, 2),
                                        config=SimulationConfig(), memory=memory)
    text = stateful.messages[1]["content"]
    assert '{"stations":["Oslo"]}' in text and '1. get_weather({"location":"Bergen"})' in text
    assert text.endswith("as for a lookup).")
    schema = stateful.response_format["json_schema"]["schema"]
    assert schema["required"] == ["response", "state"]
