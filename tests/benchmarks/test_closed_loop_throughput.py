"""Closed-loop evaluation throughput against generation alone, on the same prompts.

A closed-loop trial interleaves the model's turns with tool execution, the simulated user and the
verifier, so its turns cannot all be in flight at once: a turn waits for the previous turn's
tools. This benchmark runs every case of the demo scenarios in closed loop (``run_trial``, the
evaluate stage's own loop, with ``concurrency`` trials in flight), records every request the model
under test was sent, then sends exactly those requests again with nothing around them (the same
concurrency, a fresh response cache) and compares the two rates:

- ``local``: the embedded model in process through the local provider (native tool calls through
  agentune's training chat template; the provider batches concurrent requests). The model's
  answers decide the turns, so the replayed prompts are the ones it really met.
- ``endpoint``: an OpenAI-compatible server on 127.0.0.1 (tests/support/openai_server.py) playing
  the perfect scripted agent with a fixed latency: what the loop costs around a remote model.

``loop_over_generation`` is the closed loop's model-call rate over the generation-only rate
(1.0: the loop adds nothing; below: time spent waiting on tools, the user and the verifier, and
fewer calls in flight near the end of each trial).

Settings (environment variables): ``AGENTUNE_BENCH_SCENARIOS`` (local: 6 demo scenarios, spread
over kinds, 3 turns of 64 tokens at most; endpoint: all 66 x 8 trials), ``AGENTUNE_BENCH_CONCURRENCY`` (local 8, endpoint 32),
``AGENTUNE_BENCH_LATENCY_S`` (endpoint: 0.2).

    pytest -m benchmark -s tests/benchmarks/test_closed_loop_throughput.py
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentune.config.evaluate import ClosedLoopConfig
from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import spread
from agentune.tasks.evaluate.models import native_role
from agentune.tasks.llm.embedded_model import prepare_embedded_model
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatRequest, ChatResult
from agentune.tasks.rollouts.closed_loop import (
    NativePolicy,
    SimulatedUser,
    TrialSettings,
    rates,
    run_trial,
    scenario_tools,
)

from support.openai_server import Latency, OpenAITestServer
from support.scripted_agents import demo_records, perfect, scripted

pytestmark = pytest.mark.benchmark


@dataclass
class Recorder:
    """The gateway as the policy sees it, keeping every student request it forwards."""

    gateway: LLMGateway
    requests: list[ChatRequest] = field(default_factory=list)
    completion_tokens: int = 0

    async def chat(self, role: str, request: ChatRequest, *, stage: str) -> ChatResult:
        result = await self.gateway.chat(role, request, stage=stage)  # type: ignore[arg-type]
        if role == "student":
            self.requests.append(request)
            self.completion_tokens += result.usage.completion_tokens
        return result


async def _closed_loop(llm: LLMConfig, catalog: EnvironmentCatalog,
                       records: Sequence[ScenarioRecord], settings: TrialSettings,
                       concurrency: int) -> tuple[list[dict[str, Any]], Recorder, float]:
    rows: list[dict[str, Any]] = []
    async with LLMGateway(llm) as gateway, executor_for(catalog, ToolsConfig()) as executor:
        recorder = Recorder(gateway)
        episode = Episode(catalog, executor, gateway=gateway)
        user = SimulatedUser(gateway, settings, "evaluate")
        limit = asyncio.Semaphore(concurrency)

        async def one(record: ScenarioRecord, trial: int) -> None:
            tools = scenario_tools(catalog, record.scenario.environment)
            policy = NativePolicy(recorder, "student", tools, settings, "evaluate")  # type: ignore[arg-type]
            async with limit:
                done = await run_trial(record, policy=policy, episode=episode, user=user,
                                       system=None, settings=settings, trial=trial,
                                       group="native", verifier=VerifierConfig())
            rows.append(done.row(record, "bench"))

        start = time.perf_counter()
        await asyncio.gather(*(one(r, t) for r in records for t in range(settings.trials)))
        return rows, recorder, time.perf_counter() - start


async def _generation_only(llm: LLMConfig, requests: Sequence[ChatRequest], concurrency: int
                           ) -> tuple[float, int]:
    async with LLMGateway(llm) as gateway:
        limit = asyncio.Semaphore(concurrency)
        tokens = [0]

        async def one(request: ChatRequest) -> None:
            async with limit:
                result = await gateway.chat("student", request, stage="evaluate")
            tokens[0] += result.usage.completion_tokens

        start = time.perf_counter()
        await asyncio.gather(*(one(r) for r in requests))
        return time.perf_counter() - start, tokens[0]


def _measure(mode: str, llm: LLMConfig, fresh: LLMConfig, catalog: EnvironmentCatalog,
             records: Sequence[ScenarioRecord], settings: TrialSettings, concurrency: int,
             **extra: Any) -> dict[str, Any]:
    rows, recorder, loop_s = asyncio.run(_closed_loop(llm, catalog, records, settings,
                                                      concurrency))
    gen_s, gen_tokens = asyncio.run(_generation_only(fresh, recorder.requests, concurrency))
    calls = len(recorder.requests)
    loop_rate, gen_rate = calls / loop_s * 60, calls / gen_s * 60
    figures = {
        "benchmark": "closed_loop_throughput", "mode": mode, "scenarios": len(records),
        "trials": len(rows), "concurrency": concurrency, "model_calls": calls,
        "closed_loop_s": round(loop_s, 2), "generation_only_s": round(gen_s, 2),
        "rollouts_per_min": round(len(rows) / loop_s * 60, 1),
        "model_calls_per_min_closed_loop": round(loop_rate, 1),
        "model_calls_per_min_generation_only": round(gen_rate, 1),
        "loop_over_generation": round(loop_rate / gen_rate, 3),
        "completion_tokens_per_s_closed_loop": round(recorder.completion_tokens / loop_s, 1),
        "completion_tokens_per_s_generation_only": round(gen_tokens / gen_s, 1),
        "pass@1": rates(rows)["pass@1"], **extra}
    print(json.dumps(figures))
    return figures


@pytest.mark.timeout(3600)
def test_local_model_closed_loop_against_generation_only(tmp_path: Path) -> None:
    catalog, records = demo_records()
    chosen = spread(records, int(os.environ.get("AGENTUNE_BENCH_SCENARIOS", "6")), seed=0)
    concurrency = int(os.environ.get("AGENTUNE_BENCH_CONCURRENCY", "8"))
    base = RoleConfig(provider="local", model="embedded", batch_size=concurrency,
                      max_concurrency=concurrency)
    role = native_role(base, ClosedLoopConfig(), prepare_embedded_model(), str(tmp_path))
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=64, max_steps=3,
                             max_user_turns=1, user_max_chars=160, seed=0)

    def llm(cache: str) -> LLMConfig:
        return LLMConfig(student=role, teacher=role, cache_dir=str(tmp_path / cache))

    figures = _measure("local", llm("loop"), llm("generation"), catalog, chosen, settings,
                       concurrency, max_tokens=settings.max_tokens)
    assert figures["model_calls"] >= len(chosen)


def test_endpoint_closed_loop_against_generation_only(tmp_path: Path, monkeypatch) -> None:
    catalog, records = demo_records()
    chosen = records[: int(os.environ.get("AGENTUNE_BENCH_SCENARIOS", str(len(records))))]
    concurrency = int(os.environ.get("AGENTUNE_BENCH_CONCURRENCY", "32"))
    latency = float(os.environ.get("AGENTUNE_BENCH_LATENCY_S", "0.2"))
    monkeypatch.setenv("BENCH_KEY", "bench")
    settings = TrialSettings(trials=8, temperature=0.0, top_p=None, max_tokens=256, max_steps=6,
                             max_user_turns=1, user_max_chars=160, seed=0)
    with OpenAITestServer(scripted(chosen, catalog, lambda body: perfect),
                          latency_s=Latency.fixed(latency)) as server:
        role = RoleConfig(provider="openai", model="scripted", base_url=server.base_url,
                          api_key_env="BENCH_KEY", max_concurrency=concurrency)

        def llm(cache: str) -> LLMConfig:
            return LLMConfig(student=role, teacher=role, cache_dir=str(tmp_path / cache))

        figures = _measure("endpoint", llm("loop"), llm("generation"), catalog, chosen,
                           settings, concurrency, latency_s=latency,
                           ideal_calls_per_min=round(concurrency / latency * 60, 1))
    assert figures["pass@1"] == 1.0
