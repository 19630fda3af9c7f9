"""Synthesis throughput against the ideal: the synthesize stage's own work
(``synthesize_trajectories``: agent loop, real calculator tool, checkpoints, the gateway with a
fresh response cache) against an OpenAI-compatible server with a fixed latency L and
concurrency C, compared with C / L, the most any client can get from that server.

The server (tests/support/openai_server.py) runs in a child process, so its CPU is not the
client's: ``cpu_s_per_1000_calls`` is agentune's alone. Every query needs one calculator call,
so a trajectory is 2 teacher calls (ReAct, AutoGPT) or 3 (KuaiAgent: plan, finish, conclude).
The overhead agentune adds to a call is the time ``gateway.chat`` took, seen by the caller, minus
the time the server spent on that request (matched by the request's messages); part of it is the
wait for the answer's commit to the response cache (an answer is durable before it is used),
reported on its own.

The peer: distilabel's ``OpenAILLM`` (installed with pip into a throwaway venv under pytest's
temporary root, kept there between runs, never in the repo) replays the same teacher requests at
the same concurrency in a subprocess, once the way its generation steps call it (batches of C
through ``generate``) and once as a continuous stream of ``agenerate`` calls at most C at once.
The peer only makes LLM calls: it runs no agent loop, tools or checkpoints.

The verified variant runs the same calculator work as scenarios (one ``calculator`` call with
the product as the fact to state, in the demo's travel environment): every trajectory is replayed
and verified against its scenario's executed ground truth, as the demo's synthesis is; the line
adds the verifier's own time per 1,000 trajectories (every accepted row verified once more, one
after another, after the run).

Settings (environment variables): ``AGENTUNE_BENCH_QUERIES`` (default 1,500; x2 templates: 3,000
trajectories, 7,000 calls, ~25 s: long enough that the start and the drain of the plan, at less
than C in flight, weigh little, as in a real run of hours), ``AGENTUNE_BENCH_LATENCY_S`` (0.2),
``AGENTUNE_BENCH_CONCURRENCY`` (64), ``AGENTUNE_BENCH_PEER`` (``0`` skips the peer).

    make bench
    pytest -m benchmark -s tests/benchmarks/test_synthesis_throughput.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import BENCHMARKS, benchmark_id, benchmark_template
from agentune.tasks.build_templates.stage import TEMPLATE_FEATURES
from agentune.tasks.common.schemas import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import Call, Scenario, ScenarioRecord
from agentune.tasks.llm.cache import ResponseCache
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatRequest, ChatResult, Role
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.synthesize.agent_loop import Verification
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.sampling import (
    SynthesisInputs,
    read_catalog,
    read_queries,
    read_templates,
    sample_combinations,
    scenario_combinations,
)
from agentune.tasks.synthesize.stage import assemble_synthesis, synthesize_trajectories
from agentune.tasks.synthesize.trajectory_forms import RowFraming
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.verifier.rollout import ask_user_tool, from_steps
from agentune.tasks.verifier.verify import verify

from support.calculator_teacher import CalculatorTeacher
from support.openai_server import (
    Latency,
    OpenAITestServerProcess,
    RecordedRequest,
)

pytestmark = pytest.mark.benchmark

QUERIES = int(os.environ.get("AGENTUNE_BENCH_QUERIES", "1500"))
LATENCY_S = float(os.environ.get("AGENTUNE_BENCH_LATENCY_S", "0.2"))
CONCURRENCY = int(os.environ.get("AGENTUNE_BENCH_CONCURRENCY", "64"))
PEER = os.environ.get("AGENTUNE_BENCH_PEER", "1") != "0"
PEER_REQUIREMENTS = ("distilabel[openai]==1.5.3", "requests")  # distilabel 1.5.3 omits requests
TOOLS = ("calculator", "date_calculate")
TEMPLATES = ("kuaiagent", "kuaiagent_concluder", "react", "autogpt")


@dataclass
class TimedCall:
    request: ChatRequest
    start: float
    end: float


class TimedGateway:
    """The gateway as the stage sees it, with each call's wall time taken around it."""

    def __init__(self, inner: LLMGateway) -> None:
        self.inner = inner
        self.calls: list[TimedCall] = []

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult:
        start = time.monotonic()
        result = await self.inner.chat(role, request, stage=stage)
        self.calls.append(TimedCall(request, start, time.monotonic()))
        return result


def messages_key(messages: list[dict[str, Any]]) -> str:
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


def publish_inputs(store: ArtifactStore) -> None:
    catalog = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}
    queries = [{"id": f"q{i:05d}", "text": f"What is {100 + i} times {7 + i % 89}?", "lang": "en",
                "set_id": "set-en-000", "source": "seed", "parent_ids": [], "scenario": "math",
                "tool_ids": list(TOOLS), "pii_placeholders": [], "likely_tool_ids": ["calculator"],
                "tool_hints": ["calculator"]} for i in range(QUERIES)]
    store.publish("queries", queries, features=QUERY_FEATURES)
    store.publish("tools", [catalog[name].to_row() for name in TOOLS], features=TOOL_FEATURES)
    templates = []
    for name in TEMPLATES:
        spec, template = BENCHMARKS[name], benchmark_template(name)
        templates.append({
            "id": benchmark_id(name), "source": "benchmark", "kind": spec.kind, "set_id": None,
            "name": name, "lang": spec.lang, "protocol": spec.protocol, "text": template.text,
            "sections": {}, "style": None, "score": None, "n_instances": 0,
            "n_kept_instances": None, "kept": True, "reserved": False, "reason": None, "detail": ""})
    store.publish("templates", templates, features=TEMPLATE_FEATURES)


def bench_config(root: Path, base_url: str) -> RunConfig:
    role = {"provider": "openai", "model": "test-model", "base_url": base_url,
            "max_concurrency": CONCURRENCY, "timeout_s": 60}
    return RunConfig.model_validate({
        "store": {"root": str(root / "store")},
        "llm": {"teacher": role, "judge": role, "cache_dir": str(root / "cache")},
        "synthesis": {"templates_per_query": 2, "judge": False, "concurrency": CONCURRENCY,
                      "task_weights": {"tool_selection": 1.0}, "work_dir": str(root / "work")},
    })


async def watch_loop_lag(lags: list[float], every_s: float = 0.005) -> None:
    """How late the event loop wakes a sleeper: stalls (blocking calls, garbage collection,
    CPU contention) delay every answer waiting to be read."""
    while True:
        start = time.monotonic()
        await asyncio.sleep(every_s)
        lags.append(time.monotonic() - start - every_s)


async def run_stage(config: RunConfig, inputs: SynthesisInputs, plan: list[Any],
                    checkpoint: Path, scenarios: list[ScenarioRecord] | None = None
                    ) -> dict[str, Any]:
    """The stage's work on ``plan``; with ``scenarios``, in their environments and verified."""
    cfg = config.synthesis
    lags: list[float] = []
    async with LLMGateway(config.llm) as gateway:
        timed = TimedGateway(gateway)
        watcher = asyncio.create_task(watch_loop_lag(lags))
        cpu, start = time.process_time(), time.monotonic()
        if scenarios is None:
            executing = ToolExecutor(list(inputs.tools.values()), config.environments.tools,
                                     gateway=timed)
        else:
            catalog = demo_catalog()
            executing = executor_for(catalog, config.environments.tools, gateway=timed)
        async with executing as executor:
            verification = None if scenarios is None else Verification(
                {r.scenario.id: r for r in scenarios}, Episode(catalog, executor, gateway=timed),
                config.verifier)
            records = await synthesize_trajectories(
                plan, inputs.templates, inputs.tools, gateway=timed, executor=executor,
                settings=cfg, seed=config.seed,
                checkpoint=SynthesisCheckpoint(checkpoint), concurrency=cfg.concurrency,
                teacher_model=config.llm.teacher.model, verification=verification,
                framing=RowFraming.from_config(cfg))  # as the flow frames them
        result = assemble_synthesis(plan, records)
        end, cpu = time.monotonic(), time.process_time() - cpu
        watcher.cancel()
        return {"calls": timed.calls, "start": start, "end": end, "cpu_s": cpu, "lags": lags,
                "accepted": len(result.rows), "verified": sum(bool(r.get("verified"))
                                                              for r in result.rows),
                "usage": gateway.usage_total(), "cache": gateway.cache_stats(),
                "rows": result.rows}


def overheads(calls: list[TimedCall], served: list[RecordedRequest]) -> tuple[list[float], int]:
    """Per call: the caller's time minus the server's time for that request (identical requests
    are paired in order), and how many calls found no request to pair with."""
    by_key: dict[str, deque[RecordedRequest]] = defaultdict(deque)
    for record in sorted(served, key=lambda r: r.arrived):
        by_key[messages_key(record.body["messages"])].append(record)
    result, unmatched = [], 0
    for call in sorted(calls, key=lambda c: c.start):
        queue = by_key.get(messages_key(call.request.model_dump(mode="json")["messages"]))
        if not queue:
            unmatched += 1
            continue
        record = queue.popleft()
        assert record.service_s is not None
        result.append((call.end - call.start) - record.service_s)
    return result, unmatched


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def steady_rps(served: list[RecordedRequest]) -> float:
    """Requests per second between the 10th and the 90th percentile arrival: the rate once the
    pipeline is full and before the last trajectories drain it."""
    times = sorted(r.arrived for r in served)
    lo, hi = int(0.1 * len(times)), int(0.9 * len(times))
    return (hi - lo) / (times[hi] - times[lo])


PEER_SCRIPT = r'''
import asyncio, json, sys, time
from distilabel.models import OpenAILLM

base_url, concurrency, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
requests = [json.loads(line) for line in open(path, encoding="utf-8")]
llm = OpenAILLM(model="test-model", base_url=base_url, api_key="EMPTY", max_retries=0, timeout=60)
llm.load()

def kwargs(r):
    # OpenAILLM types response_format as {"type": ...} only: a json_schema one goes in the body.
    extra = {"extra_body": {"response_format": r["response_format"]}} if r.get("response_format") \
        else {}
    return dict(max_new_tokens=r["max_tokens"], temperature=r.get("temperature", 0.0), **extra)

# The way distilabel's generation steps call it: one batch of `concurrency` inputs at a time,
# all with the same generation settings (the first request's; the scripted replies ignore them).
cpu, start = time.process_time(), time.monotonic()
done = 0
for i in range(0, len(requests), concurrency):
    batch = requests[i:i + concurrency]
    done += len(llm.generate(inputs=[r["messages"] for r in batch], **kwargs(batch[0])))
step = {"requests": done, "wall_s": time.monotonic() - start, "cpu_s": time.process_time() - cpu}

async def stream():
    slots = asyncio.Semaphore(concurrency)
    async def one(r):
        async with slots:
            return await llm.agenerate(input=r["messages"], **kwargs(r))
    return await asyncio.gather(*(one(r) for r in requests))

cpu, start = time.process_time(), time.monotonic()
outputs = llm.event_loop.run_until_complete(stream())
streamed = {"requests": len(outputs), "wall_s": time.monotonic() - start,
            "cpu_s": time.process_time() - cpu}
print(json.dumps({"distilabel": __import__("distilabel").__version__, "step": step,
                  "stream": streamed}))
'''


def peer_python(cache_root: Path) -> tuple[Path | None, str]:
    """The throwaway venv's python with distilabel installed (made once, reused), or the reason
    it could not be made."""
    venv = cache_root / "agentune-bench-distilabel-venv"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.is_file() and marker.read_text(encoding="utf-8") == " ".join(PEER_REQUIREMENTS):
        return python, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                       capture_output=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS],
                       check=True, capture_output=True, text=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        return None, f"pip install {' '.join(PEER_REQUIREMENTS)} failed: {exc} {stderr[-300:]}"
    marker.write_text(" ".join(PEER_REQUIREMENTS), encoding="utf-8")
    return python, ""


def run_peer(cache_root: Path, base_url: str, served: list[RecordedRequest],
             folder: Path) -> dict[str, Any]:
    python, reason = peer_python(cache_root)
    if python is None:
        return {"peer": None, "peer_reason": reason}
    path = folder / "requests.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for record in sorted(served, key=lambda r: r.arrived):
            body = record.body
            fh.write(json.dumps({"messages": body["messages"], "max_tokens": body["max_tokens"],
                                 "temperature": body.get("temperature", 0.0),
                                 "response_format": body.get("response_format")}) + "\n")
    done = subprocess.run([str(python), "-c", PEER_SCRIPT, base_url, str(CONCURRENCY), str(path)],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return {"peer": None, "peer_reason": f"peer run failed: {done.stderr[-500:]}"}
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {"peer": f"distilabel {report['distilabel']} OpenAILLM",
            **{f"peer_{mode}": {"requests": r["requests"], "wall_s": round(r["wall_s"], 2),
                                "rps": round(r["requests"] / r["wall_s"], 1),
                                "cpu_s_per_1000_calls": round(1000 * r["cpu_s"] / r["requests"],
                                                              3)}
               for mode, r in report.items() if mode in ("step", "stream")}}


def measure(ours: dict[str, Any], plan: list[Any], served: list[RecordedRequest],
            counters: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's figures for one run of the stage."""
    calls = len(ours["calls"])
    wall = ours["end"] - ours["start"]
    ideal = CONCURRENCY / LATENCY_S
    added, unmatched = overheads(ours["calls"], served)
    return {
        "benchmark": "synthesis_throughput", "concurrency": CONCURRENCY,
        "latency_s": LATENCY_S, "trajectories": len(plan), "accepted": ours["accepted"],
        "requests": calls, "wall_s": round(wall, 2),
        "achieved_rps": round(calls / wall, 1), "ideal_rps": round(ideal, 1),
        "ratio": round(calls / wall / ideal, 3),
        "steady_rps": round(steady_rps(served), 1),
        "steady_ratio": round(steady_rps(served) / ideal, 3),
        "overhead_ms_p50": round(1000 * statistics.median(added), 2),
        "overhead_ms_p99": round(1000 * percentile(added, 0.99), 2),
        "unmatched_calls": unmatched,
        "loop_lag_ms_p99": round(1000 * percentile(ours["lags"], 0.99), 2),
        "loop_lag_ms_max": round(1000 * max(ours["lags"]), 2),
        "cpu_s_per_1000_calls": round(1000 * ours["cpu_s"] / calls, 3),
        # Mean calls open as the stage sees them and mean requests open on the server: the
        # first below C means time between a trajectory's calls (agent loop, tools,
        # checkpoints), the gap between the two the HTTP path.
        "mean_open_calls": round(sum(c.end - c.start for c in ours["calls"]) / wall, 1),
        "mean_open_requests_server": round(sum(r.service_s or 0.0 for r in served) / wall, 1),
        "server_max_serving": counters["max_serving"], "server_rejected": counters["rejected"],
        "retries": ours["usage"]["retries"], "failures": ours["usage"]["failures"],
        # Durable before used: what each call waits for its answer's commit (part of the
        # overhead above), and how many answers share a transaction.
        "cache_commit_wait_ms_p50": round(1000 * ours["cache"]["wait_s_p50"], 2),
        "cache_commit_wait_ms_p99": round(1000 * ours["cache"]["wait_s_p99"], 2),
        "cache_commit_wait_ms_mean": round(1000 * ours["cache"]["wait_s_mean"], 2),
        "cache_answers_per_commit": round(
            ours["cache"]["writes"] / max(1, ours["cache"]["commits"]), 1),
    }


def check_run(ours: dict[str, Any], plan: list[Any], served: list[RecordedRequest],
              config: RunConfig) -> None:
    calls = len(ours["calls"])
    assert len(served) == calls
    assert ours["accepted"] == len(plan)  # every trajectory made it: the script is complete
    assert calls >= 2 * len(plan) and ours["usage"]["cached"] == 0
    cache = ResponseCache(Path(config.llm.cache_dir) / "responses.sqlite")
    assert len(cache) == calls  # every answer was stored before the stage moved on
    cache.close()


def test_synthesis_throughput_against_the_ideal(tmp_path: Path,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    store = ArtifactStore(tmp_path / "store")
    publish_inputs(store)
    with OpenAITestServerProcess(CalculatorTeacher(), latency_s=Latency.fixed(LATENCY_S),
                                 max_concurrency=CONCURRENCY, overflow="queue",
                                 honour_max_tokens=True) as server:
        config = bench_config(tmp_path, server.base_url)
        tools = read_catalog(store.read("tools"), "tools")
        inputs = SynthesisInputs(read_queries(store.read("queries"), "queries", tools), tools,
                                 read_templates(store.read("templates"), "templates"))
        plan = sample_combinations(inputs, config.synthesis, seed=config.seed)
        ours = asyncio.run(run_stage(config, inputs, plan, tmp_path / "work" / "v"))
        served = server.requests()
        counters = server.counters()

        line = measure(ours, plan, served, counters)
        calls, wall = len(ours["calls"]), ours["end"] - ours["start"]
        if PEER:
            peer_folder = tmp_path / "peer"
            peer_folder.mkdir()
            cache_root = tmp_path_factory.getbasetemp().parent
            line.update(run_peer(cache_root, server.base_url, served, peer_folder))
            if line.get("peer_step"):
                line["peer_rps"] = line["peer_step"]["rps"]
                line["ours_vs_peer"] = round(calls / wall / line["peer_rps"], 3)
                line["ours_vs_peer_stream"] = round(calls / wall / line["peer_stream"]["rps"], 3)
    print(json.dumps(line))
    assert line["unmatched_calls"] == 0
    check_run(ours, plan, served, config)


def demo_catalog() -> EnvironmentCatalog:
    return load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml",
                             implementations=ToolsConfig().implementations)


def calculator_scenarios() -> list[ScenarioRecord]:
    """The benchmark's queries as scenarios with their ground truth executed."""
    catalog = demo_catalog()

    async def records() -> list[ScenarioRecord]:
        out = []
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            for i in range(QUERIES):
                a, b = 100 + i, 7 + i % 89
                scenario = Scenario(
                    id=f"calc-{i:05d}", environment="travel", lang="en", kind="single_call",
                    request=f"What is {a} times {b}?", facts=[str(a * b)],
                    ground_truth=[[Call(name="calculator", arguments={"expression": f"{a}*{b}"})]])
                run = await execute_ground_truth(scenario, episode)
                out.append(ScenarioRecord(scenario, "train", episode.now, run.initial_state,
                                          run.expected_state))
        return out

    return asyncio.run(records())


async def verify_again(rows: list[dict[str, Any]], scenarios: list[ScenarioRecord],
                       config: RunConfig) -> float:
    """Seconds to verify every row once more, one after another, nothing else running: the
    verifier's own cost (replay in a fresh environment, state and answer checks)."""
    by_id = {r.scenario.id: r for r in scenarios}
    catalog = demo_catalog()
    async with executor_for(catalog, config.environments.tools) as executor:
        episode = Episode(catalog, executor)
        start = time.perf_counter()
        for row in rows:
            record = by_id[row["scenario_id"]]
            rollout = from_steps(row["steps"], row["protocol"], tools=row["tools"])
            verdict = await verify(record.scenario, record.expected_state, rollout, episode,
                                   config.verifier, initial_state=record.start_state,
                                   now=record.now)
            assert verdict.passed, verdict.reasons
        return time.perf_counter() - start


def test_verified_synthesis_throughput_against_the_ideal(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    publish_inputs(store)
    scenarios = calculator_scenarios()
    with OpenAITestServerProcess(CalculatorTeacher(), latency_s=Latency.fixed(LATENCY_S),
                                 max_concurrency=CONCURRENCY, overflow="queue",
                                 honour_max_tokens=True) as server:
        config = bench_config(tmp_path, server.base_url)
        config = config.model_copy(update={"synthesis": config.synthesis.model_copy(
            update={"templates_per_scenario": 2, "attempts": 1})})
        catalog = demo_catalog()
        ask = ask_user_tool()
        tools = {**{t.name: t for t in catalog.training_tools()}, ask.name: ask}
        offered = {"travel": (*(t.name for t in catalog.offered_tools("travel")), ask.name)}
        inputs = SynthesisInputs([], tools, read_templates(store.read("templates"), "templates"))
        plan = scenario_combinations(scenarios, inputs.templates, offered, config.synthesis,
                                     seed=config.seed)
        ours = asyncio.run(run_stage(config, inputs, plan, tmp_path / "work" / "v", scenarios))
        served = server.requests()
        line = measure(ours, plan, served, server.counters())
    seconds = asyncio.run(verify_again(ours["rows"], scenarios, config))
    line.update({"benchmark": "synthesis_throughput_verified", "verified": ours["verified"],
                 "verify_s_per_1000_trajectories": round(1000 * seconds / len(ours["rows"]), 2)})
    print(json.dumps(line))
    assert ours["verified"] == len(plan)
    check_run(ours, plan, served, config)
