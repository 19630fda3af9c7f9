"""CPU training settings for the embedded SmolLM2-135M, through the real train stage, on rows
shaped like the outcome's: which setting trains fastest at the same loss.

Each setting runs ``plan_training`` + ``run_training`` (the launcher, torchrun, the training job)
with configs/outcome.yaml's train section (max_length, learning rates, precision ``auto``,
warmup) for a few SFT steps and a few DPO steps from the embedded model, same rows, same seed,
the same global batch (4 sequences, or 4 pairs, a step):

- ``zero3_2proc``: DeepSpeed ZeRO-3 over 2 gloo processes of 1 thread (the setting before this
  benchmark; the speedups are ratios to it);
- ``none_1proc``: one process of 2 threads, no DeepSpeed (the plain TRL trainer);
- ``zero0_1proc`` / ``zero1_1proc``: DeepSpeed ZeRO stage 0 / 1 in one process of 2 threads;
- ``zero0_2proc``: ZeRO stage 0 over 2 processes of 1 thread (data parallel: whole bf16 weights
  in each, gradients all-reduced through DeepSpeed's shared-memory collective);
- ``..._no_ckpt``: the same without gradient checkpointing (the 135M's activations fit in memory
  many times over; recomputing them costs about a third more compute).

The rows: no outcome store is published on this machine, so they are built the way the
outcome's guided attempts are: every demo scenario (data/demo/scenarios.yaml) whose ground truth
runs, its calls made in the environment (the real tool results), its environment's tools
offered, an answer stating its facts; 150 such agent rows and 30 of data/demo/general.jsonl (the
outcome's 5:1 mix, 180 rows). DPO pairs: the prompt up to the last step, the ground truth's
call chosen, the same call with a wrong argument rejected.

Printed, one JSON line: per method and setting the steady tokens/s (non-padding tokens from the
second logged step to the last; the first step pays for warm-up), seconds a step, achieved
GFLOP/s (6 x parameters x tokens/s; gradient checkpointing's recompute and DPO's reference
forward are not counted), its fraction of the measured matmul peak in the training dtype
(``resolve_precision("auto", "cpu")``), the launch's wall time, the loss at every step (and the
largest relative difference from the ZeRO-3 run's) and ``speedup`` (tokens/s for SFT, step time
for DPO, over ``zero3_2proc``); and the padded share of the tokens the batches compute.

    flock /tmp/heavy.lock .venv/bin/pytest -m benchmark -s tests/benchmarks/test_training_settings.py

Settings (environment variables): ``AGENTUNE_BENCH_SFT_STEPS`` (default 4),
``AGENTUNE_BENCH_DPO_STEPS`` (2; the first step warms the learning rate up from 0, so both DPO
losses are ln 2: compare DPO losses with 3 or more), ``AGENTUNE_BENCH_METHODS`` (``sft,dpo``) and
``AGENTUNE_BENCH_SETTINGS`` (comma-separated names of :data:`SETTINGS`; default :data:`DEFAULT`).
On 2 cores the ZeRO-3 runs take most of the time: ~15 minutes for the four default settings and
both methods. Each method needs 2 or more steps: the rates are measured from the second logged
step on.
A timed run needs the machine to itself: another process on one of the 2 cores slowed the
one-process settings 3-4x (their 2 threads wait on each other) and ZeRO-3 by a third.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig, load_config
from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.common.schemas import PREFERENCE_FEATURES, SFT_FEATURES
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import Call, Scenario, load_scenarios
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.precision import cpu_report, resolve_precision
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.tools.language import tool_in_language
from agentune.tasks.train.job import TrainJob
from agentune.tasks.train.stage import count_parameters, plan_training, run_training

from support.planted import ideal_answer, with_wrong_argument

pytestmark = pytest.mark.benchmark

DEMO = PROJECT_ROOT / "data" / "demo"
TODAY = "zero3_2proc"


def setting(deepspeed: str, processes: int, *, checkpointing: bool = True) -> dict[str, Any]:
    """``processes`` sharing the 2 threads and the 4 sequences (or pairs) of a step."""
    return {"deepspeed": deepspeed, "nproc_per_node": processes,
            "cpu_threads_per_process": 2 // processes,
            "gradient_accumulation_steps": 4 // processes, "gradient_checkpointing": checkpointing}


SETTINGS: dict[str, dict[str, Any]] = {
    TODAY: setting("zero3", 2),
    "none_1proc": setting("none", 1),
    "zero0_1proc": setting("zero0", 1),
    "zero1_1proc": setting("zero1", 1),
    "zero0_2proc": setting("zero0", 2),
    "none_1proc_no_ckpt": setting("none", 1, checkpointing=False),
    "zero0_1proc_no_ckpt": setting("zero0", 1, checkpointing=False),
    "zero0_2proc_no_ckpt": setting("zero0", 2, checkpointing=False),
    "zero3_2proc_no_ckpt": setting("zero3", 2, checkpointing=False),
}
DEFAULT = (TODAY, "none_1proc", "zero0_1proc", "zero0_1proc_no_ckpt")
"""What a run without AGENTUNE_BENCH_SETTINGS compares: the issue's settings and the chosen one
(configs/demo.yaml's train section); ZeRO-1 alone takes ~7 minutes of SFT (3x ZeRO-0's time)."""

AGENT_ROWS, GENERAL_ROWS = 150, 30  # the outcome's sft_dataset: agent 150, general 30
PAIRS = 64
DISTRACTORS = 3  # synthesis.distractor_tools' default
SYSTEM = "You are a helpful agent. Use the tools when they help. Today is Monday 2025-06-02."


# ---- rows -------------------------------------------------------------------------------------


def _call_turn(step: list[Call], first_id: int) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{first_id + i}", "type": "function",
         "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(step)]}


def _head(s: Scenario) -> list[dict[str, Any]]:
    """System and request, and for missing information the question and the user's answer."""
    head = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": s.request}]
    if s.kind == "missing_info" and s.hidden:
        head += [{"role": "assistant", "content": "Could you give me the details?"},
                 {"role": "user", "content": s.hidden}]
    return head


def _steps(steps: list[list[Call]], results: list[list[Any]]) -> list[dict[str, Any]]:
    """One assistant turn per step and its tool results, as the loop records them."""
    messages: list[dict[str, Any]] = []
    for step, step_results in zip(steps, results, strict=True):
        turn = _call_turn(step, sum(len(m.get("tool_calls", [])) for m in messages))
        messages.append(turn)
        messages += [{"role": "tool", "tool_call_id": call["id"],
                      "content": json.dumps(result, ensure_ascii=False)}
                     for call, result in zip(turn["tool_calls"], step_results, strict=True)]
    return messages


def offered_tools(s: Scenario, catalog: EnvironmentCatalog) -> list[dict[str, Any]]:
    """As synthesis offers them by default: the environment's tools, the shared tools the ground
    truth calls and DISTRACTORS other shared ones (the first, not BM25's), each described in
    the request's language."""
    main, *shared = catalog.offered(s.environment)
    called = {c.name for c in s.calls()}
    others = [t for spec in shared for t in spec.tools]
    picked = [t for t in others if t.name in called]
    picked += [t for t in others if t.name not in called][:DISTRACTORS]
    return [tool_in_language(t, s.lang).to_openai() for t in [*main.tools, *picked]]


async def ground_truth_runs() -> list[dict[str, Any]]:
    """Every demo scenario whose ground truth runs: its conversation (real tool results, an
    answer stating the facts), offered tools, and the pair at its last step."""
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    out = []
    async with executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor)
        for s in load_scenarios(DEMO / "scenarios.yaml", catalog):
            gt = await execute_ground_truth(s, episode)
            if gt.problem is not None:
                continue
            steps = [list(step) for step in s.ground_truth]
            answer = {"role": "assistant", "content": ideal_answer(s, list(s.facts))}
            wrong = with_wrong_argument(steps) if steps else None
            pair = None
            if wrong is not None:
                first = sum(len(step) for step in steps[:-1])
                pair = {"prompt": _head(s) + _steps(steps[:-1], gt.results[:-1]),
                        "chosen": [_call_turn(steps[-1], first)],
                        "rejected": [_call_turn(wrong[-1], first)]}
            out.append({"scenario": s, "tools": offered_tools(s, catalog), "pair": pair,
                        "messages": _head(s) + _steps(steps, gt.results) + [answer]})
    return out


def general_conversations() -> list[list[dict[str, Any]]]:
    rows = [json.loads(line) for line in
            (DEMO / "general.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return [[{"role": "user", "content": r["instruction"] + (f"\n\n{r['input']}" if r["input"]
                                                            else "")},
             {"role": "assistant", "content": r["output"]}] for r in rows]


def sft_rows(runs: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """The outcome's mix: 150 agent rows (the scenarios cycled, seeded) and 30 general ones."""
    rng = random.Random(seed)
    agent = [runs[i % len(runs)] for i in range(AGENT_ROWS)]
    general = general_conversations()
    rows = [(r["messages"], r["tools"], r["scenario"].lang, "agent") for r in agent]
    rows += [(general[i % len(general)], [], "en", "general") for i in range(GENERAL_ROWS)]
    rng.shuffle(rows)
    return [{"id": f"r{i}", "split": "train", "source": source, "query_id": f"q{i}",
             "set_id": f"s{i}", "template_id": "messages", "template_source": "benchmark",
             "task_type": "tool_selection" if tools else "general", "lang": lang,
             "messages": messages, "tools": tools, "steps": [], "cluster_id": f"c{i}",
             "n_tokens": None, "kind": None, "derivation": "none", "derived_from": None}
            for i, (messages, tools, lang, source) in enumerate(rows)]


def preference_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pairs = [r for r in runs if r["pair"] is not None]
    rows = []
    for i in range(PAIRS):
        run = pairs[i % len(pairs)]
        s = run["scenario"]
        rows.append({"id": f"p{i}", "split": "train", "source": "attempts", "scenario_id": s.id,
                     "kind": s.kind, "lang": s.lang, "decision": len(run["pair"]["prompt"]),
                     "tools": run["tools"], **run["pair"], "chosen_id": f"a{i}",
                     "rejected_id": f"b{i}", "chosen_reward": 1.0, "rejected_reward": 0.0,
                     "margin": 1.0, "chosen_components": {"state": 1.0},
                     "rejected_components": {"state": 0.0}})
    return rows


# ---- measuring --------------------------------------------------------------------------------


def matmul_peak_gflops(dtype: Any, n: int = 2048, reps: int = 5) -> float:
    """The best of ``reps`` n x n matmuls in ``dtype`` on this process's threads."""
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up: kernels chosen, memory touched
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


async def run_setting(config: RunConfig, store: ArtifactStore) -> dict[str, Any]:
    """One launch through the stage: steady tokens/s and step time (after the first logged
    step), wall time, the loss at every step."""
    plan = plan_training(config, store)
    logs: list[tuple[float, dict[str, Any]]] = []

    def on_progress(event: dict[str, Any]) -> None:
        if event["event"] == "log":
            logs.append((time.perf_counter(), event))

    started = time.perf_counter()
    await run_training(plan, on_line=lambda line: None, on_progress=on_progress)
    wall = time.perf_counter() - started
    (t0, first), (t1, last) = logs[0], logs[-1]
    return {"tokens_per_s": (last["tokens_seen"] - first["tokens_seen"]) / (t1 - t0),
            "step_s": (t1 - t0) / (last["step"] - first["step"]), "wall_s": round(wall, 1),
            "losses": [round(e["loss"], 4) for _, e in logs], "job": plan.job}


def padded_share(job: TrainJob, micro_batches: int, **update: Any) -> float:
    """Share of the tokens the first ``micro_batches`` batches compute that are padding (the
    job's own trainer and collator, built in this process; nothing is trained)."""
    from agentune.tasks.train.sft_trainer import build_trainer

    trainer = build_trainer(job.model_copy(update={"deepspeed_config": None, **update}))
    computed = real = 0
    for _, batch in zip(range(micro_batches), trainer.get_train_dataloader()):
        mask = batch.get("attention_mask")  # padding-free batches have none: no padding
        computed += batch["input_ids"].numel()
        real += int(mask.sum()) if mask is not None else batch["input_ids"].numel()
    return round(1 - real / computed, 4)


def summarise(runs: dict[str, dict[str, Any]], params: int, peak: float,
              rate: str) -> dict[str, Any]:
    """Per setting: rates, GFLOP/s and peak fraction, losses against today's, ``speedup``."""
    today = runs.get(TODAY)
    out = {}
    for name, r in runs.items():
        gflops = 6 * params * r["tokens_per_s"] / 1e9
        row = {"tokens_per_s": round(r["tokens_per_s"], 1), "step_s": round(r["step_s"], 2),
               "tokens_per_step": round(r["tokens_per_s"] * r["step_s"]),
               "gflops": round(gflops, 1), "peak_fraction": round(gflops / peak, 4),
               "wall_s": r["wall_s"], "final_loss": r["losses"][-1], "losses": r["losses"]}
        if today is not None:
            diffs = [abs(a - b) / abs(b) for a, b in zip(r["losses"], today["losses"])]
            row["loss_max_rel_diff"] = round(max(diffs), 4)
            row["speedup"] = round(r["tokens_per_s"] / today["tokens_per_s"] if rate == "tokens"
                                   else today["step_s"] / r["step_s"], 2)
        out[name] = row
    return out


def padded_shares(method: str, job: TrainJob, steps: int) -> dict[str, float]:
    """The padding the batches of ``steps`` steps (4 sequences or pairs each) compute: one at a
    time (as the settings train), and for SFT 4 in one batch and padding-free (packed); TRL 1.16
    has no padding-free DPO ("temporarily unavailable"): a pair's chosen and rejected are padded
    to one length."""
    shares = {"batch_1": padded_share(job, 4 * steps, per_device_batch_size=1)}
    if method == "sft":
        shares["batch_4"] = padded_share(job, steps, per_device_batch_size=4)
        shares["padding_free"] = padded_share(job, steps, packing=True)
    return shares


@pytest.mark.timeout(3600)
async def test_cpu_training_settings_on_the_outcomes_rows(tmp_path: Path) -> None:
    import torch

    steps = {"sft": int(os.environ.get("AGENTUNE_BENCH_SFT_STEPS", "4")),
             "dpo": int(os.environ.get("AGENTUNE_BENCH_DPO_STEPS", "2"))}
    methods = os.environ.get("AGENTUNE_BENCH_METHODS", "sft,dpo").split(",")
    short = {method: n for method, n in steps.items() if method in methods and n < 2}
    if short:
        pytest.fail(f"the steady rates need 2 or more steps a method (the first pays for "
                    f"warm-up): AGENTUNE_BENCH_{{SFT,DPO}}_STEPS give {short}")
    names = os.environ.get("AGENTUNE_BENCH_SETTINGS", ",".join(DEFAULT)).split(",")
    runs = await ground_truth_runs()
    store = ArtifactStore(tmp_path / "store")
    store.publish("sft_dataset", sft_rows(runs), features=SFT_FEATURES)
    store.publish("preferences", preference_rows(runs), features=PREFERENCE_FEATURES)
    model = resolve_model_path("embedded")
    outcome = load_config(PROJECT_ROOT / "configs" / "outcome.yaml")
    base = outcome.merged(store={"root": str(store.root)}, train={
        "base_model": str(model), "logging_steps": 1, "save_steps": 10_000,
        "eval_steps": 10_000, "resume_from": None, "max_steps": steps["sft"],
        "dpo": {"max_steps": steps["dpo"]}})
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for method in methods:
        results[method] = {}
        for name in names:
            # A work dir each: gradient checkpointing is not in a run's identity (same weights).
            config = base.merged(train={"method": method, **SETTINGS[name],
                                        "work_dir": str(tmp_path / "runs" / name)})
            results[method][name] = await run_setting(config, store)

    precision = resolve_precision("auto", "cpu")
    peak = matmul_peak_gflops(precision.dtype)
    params = count_parameters(model)
    line: dict[str, Any] = {
        "benchmark": "cpu_training_settings", "cpu": cpu_report()["model"],
        "threads": torch.get_num_threads(), "model": "embedded SmolLM2-135M",
        "parameters": params, "precision": precision.name, "peak_gflops": round(peak, 1),
        "rows": {"sft": AGENT_ROWS + GENERAL_ROWS, "dpo_pairs": PAIRS,
                 "agent_scenarios": len(runs)}}
    for method, runs_of in results.items():
        rate = "tokens" if method == "sft" else "step"
        settings = summarise(runs_of, params, peak, rate)
        line[method] = {
            "steps": steps[method], "per_step": 4, "settings": settings,
            "padded_share": padded_shares(method, next(iter(runs_of.values()))["job"],
                                          steps[method]),
            "fastest": max(settings, key=lambda n: settings[n]["tokens_per_s"]) if rate ==
            "tokens" else min(settings, key=lambda n: settings[n]["step_s"])}
    print(json.dumps(line, ensure_ascii=False))
    for method in results:
        for name, row in line[method]["settings"].items():
            # The same rows, seed and global batch: every setting trains the same model.
            assert row.get("loss_max_rel_diff", 0.0) < 0.05, (method, name, row)
