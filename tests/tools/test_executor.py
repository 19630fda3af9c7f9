"""The executor over the whole demo catalog: every tool runs through the one interface (real
ones locally, simulated ones via a scripted teacher), and every failure is an observation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.tools import (
    DEMO_IMPLEMENTATIONS,
    SandboxConfig,
    SimulationConfig,
    ToolsConfig,
)
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.tools.calculator import Calculator
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.tools.executor import ToolExecutor, ToolSetupError

from support.openai_server import Hang, OpenAITestServer, Reply

KEY_ENV = "AGENTUNE_TEST_KEY"
TOOLS = load_tool_catalog("data/demo/tools.yaml")
CATALOG = {tool.name: tool for tool in TOOLS}
SANDBOX = SandboxConfig(cpu_time_s=2, memory_mb=256, wall_time_s=5)

# One valid call per demo tool; a tool added to the catalog without one fails the first test.
EXAMPLE_CALLS: dict[str, dict[str, Any]] = {
    "web_search": {"query": "卢浮宫 开放时间"},
    "read_webpage": {"url": "https://example.com/blog/agent-tuning"},
    "encyclopedia_lookup": {"topic": "光合作用", "language": "zh"},
    "get_weather": {"location": "Chengdu", "days": 3},
    "calculator": {"expression": "3.75 * 128 - 96"},
    "run_python": {"code": "print(sorted([5, 3, 9, 1]))"},
    "date_calculate": {"operation": "weekday", "start_date": "1969-07-20"},
    "get_current_datetime": {"timezone": "Asia/Shanghai"},
    "currency_convert": {"amount": 1000, "from_currency": "USD", "to_currency": "CNY"},
    "translate": {"text": "欢迎参加明天的产品发布会", "target_language": "en"},
    "send_email": {
        "to": ["finance-team@heron.example.com"],
        "subject": "Q3 report",
        "body": "The Q3 report will be two days late.",
    },
    "contacts_lookup": {"name": "finance team"},
    "stock_quote": {"symbol": "AAPL", "period": "5d"},
    "unit_convert": {"value": 100, "from_unit": "°F", "to_unit": "°C"},
    "search_restaurants": {"location": "Chengdu", "cuisine": "Sichuan"},
}


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-0000")


def teacher(body: dict[str, Any], n: int) -> Reply:
    tool = body["messages"][1]["content"].split("API function: ", 1)[1].split("\n", 1)[0]
    return Reply(json.dumps({"error": "", "response": {"api": tool, "status": "ok"}}))


def gateway(server: OpenAITestServer, tmp_path: Path) -> LLMGateway:
    role = RoleConfig(
        provider="openai",
        model="teacher-model",
        base_url=server.base_url,
        api_key_env=KEY_ENV,
        max_retries=0,
    )
    return LLMGateway(LLMConfig(teacher=role, cache_dir=str(tmp_path / "cache")))


def config(**settings: Any) -> ToolsConfig:
    settings.setdefault("simulation", SimulationConfig(error_rate=0))
    return ToolsConfig(sandbox=SANDBOX, **settings)


async def test_every_demo_tool_executes_through_the_interface(openai_server, tmp_path) -> None:
    assert set(EXAMPLE_CALLS) == set(CATALOG)
    srv = openai_server(teacher)
    roomy = config(max_tool_response_length=4096)  # untruncated, so every content parses as JSON
    async with gateway(srv, tmp_path) as gw, ToolExecutor(TOOLS, roomy, gateway=gw) as tools:
        observations = {
            name: await tools.execute(name, args) for name, args in EXAMPLE_CALLS.items()
        }
        kinds = tools.kinds()
    for name, obs in observations.items():
        assert obs.ok, (name, obs.content)
        assert obs.tool == name and obs.kind == kinds[name] and obs.content
        json.loads(obs.content)
    real = {name for name, kind in kinds.items() if kind == "real"}
    assert real == set(DEMO_IMPLEMENTATIONS)
    simulated = {name for name, kind in kinds.items() if kind == "simulated"}
    assert simulated == set(CATALOG) - real
    answered = {json.loads(observations[name].content)["api"] for name in simulated}
    assert answered == simulated and len(srv.requests) == len(simulated)
    assert json.loads(observations["run_python"].content) == {"stdout": "[1, 3, 5, 9]\n"}
    assert json.loads(observations["calculator"].content)["result"] == 384.0


async def test_unknown_tool_and_invalid_arguments_are_observations(openai_server, tmp_path):
    srv = openai_server(teacher)
    async with gateway(srv, tmp_path) as gw, ToolExecutor(TOOLS, config(), gateway=gw) as tools:
        unknown = await tools.execute("teleport", {"to": "Mars"})
        missing = await tools.execute("get_weather", {"city": "Chengdu"})
        not_object = await tools.execute("calculator", "1+1")
        bad_code = await tools.execute(
            "currency_convert", {"amount": 10, "from_currency": "usd", "to_currency": "CNY"})
    assert (unknown.ok, unknown.kind, unknown.error_kind) == (False, None, "unknown_tool")
    assert json.loads(unknown.content) == {"error": "unknown tool 'teleport'"}
    assert missing.error_kind == "invalid_arguments" and missing.kind == "simulated"
    assert json.loads(missing.content)["fields"] == ["city", "location"]
    assert "field 'location': is required but missing" in missing.content
    assert not_object.error_kind == "invalid_arguments" and "JSON object" in not_object.content
    assert json.loads(bad_code.content)["fields"] == ["from_currency"]
    assert len(srv.requests) == 0  # nothing invalid reaches the teacher


async def test_tool_time_limit_gives_a_timeout_observation(openai_server, tmp_path) -> None:
    srv = openai_server(lambda body, n: Hang(10, teacher(body, n)))
    settings = config(limits={"stock_quote": {"timeout_s": 0.5}})
    async with (
        gateway(srv, tmp_path) as gw,
        ToolExecutor([CATALOG["stock_quote"]], settings, gateway=gw) as tools,
    ):
        obs = await tools.execute("stock_quote", {"symbol": "AAPL"})
    assert obs.error_kind == "timeout" and "within 0.5 s" in obs.content
    assert obs.elapsed_s < 3


async def test_concurrency_limit_per_tool(openai_server, tmp_path) -> None:
    import asyncio

    for limit, expected in ((1, 1), (8, 3)):
        srv = openai_server(teacher, latency_s=0.15)
        settings = config(limits={"stock_quote": {"max_concurrency": limit}})
        async with (
            gateway(srv, tmp_path / str(limit)) as gw,
            ToolExecutor(TOOLS, settings, gateway=gw) as tools,
        ):
            await asyncio.gather(
                *(tools.execute("stock_quote", {"symbol": s}) for s in ("A", "B", "C"))
            )
        assert srv.max_in_flight == expected


async def test_observations_are_truncated_per_tool_settings(openai_server, tmp_path) -> None:
    long_text = "print('\\n'.join(f'line {i}' for i in range(500)))"
    settings = config(
        max_tool_response_length=64,
        tool_response_truncate_side="left",
        limits={"run_python": {"timeout_s": 60, "tool_response_truncate_side": "right"}},
    )
    srv = openai_server(teacher)
    async with gateway(srv, tmp_path) as gw, ToolExecutor(TOOLS, settings, gateway=gw) as tools:
        code = await tools.execute("run_python", {"code": long_text})
        search = await tools.execute("web_search", {"query": "Louvre opening hours"})
    assert code.ok and code.truncated and code.content_tokens > 64
    assert code.content.startswith("(truncated)") and "line 499" in code.content
    assert search.truncated and search.content.startswith('{"query"')
    assert search.content.endswith("(truncated)")


async def test_a_crashing_tool_is_an_observation(monkeypatch) -> None:
    async def broken(self, arguments, context):
        raise RuntimeError("bug in the tool")

    monkeypatch.setattr(Calculator, "run", broken)
    async with ToolExecutor([CATALOG["calculator"]], config()) as tools:
        obs = await tools.execute("calculator", {"expression": "1+1"})
    assert obs.error_kind == "execution" and "RuntimeError: bug in the tool" in obs.content


def test_setup_errors_name_the_tool() -> None:
    with pytest.raises(
        ToolSetupError, match="'get_weather' is bound to implementation 'calculator'"
    ):
        ToolExecutor(
            [CATALOG["get_weather"]], config(implementations={"get_weather": "calculator"})
        )
    with pytest.raises(ToolSetupError, match="needs an LLM gateway"):
        ToolExecutor(TOOLS, config())
    with pytest.raises(ToolSetupError, match="simulate_unbound is off"):
        ToolExecutor([CATALOG["translate"]], config(simulate_unbound=False))
    with pytest.raises(ValueError, match="shorter than environments.tools.sandbox.wall_time_s"):
        config(limits={"run_python": {"timeout_s": 1}})
    with pytest.raises(ValueError, match="UTC offset"):
        config(now="2025-06-02T09:00:00")
