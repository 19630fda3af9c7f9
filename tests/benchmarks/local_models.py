"""The offline models side by side: what each can do before anything is trained.

For each model (default: the embedded SmolLM2-135M and Qwen2.5-Coder-0.5B, prepared by
``agentune prepare-model qwen2.5-coder-0.5b``), in one run, with the outcome config
(configs/outcome.yaml) otherwise:

- **as a synthesis teacher, grammar steps**: one unguided, greedy attempt per train scenario
  under the benchmark planner templates (KuaiAgent, ReAct, AutoGPT), each step constrained by the
  step grammar, verified as synthesis verifies (the model is teacher and judge);
- **as a synthesis teacher, its chat template with tools**: the same train scenarios, one greedy
  closed-loop trial with the tools rendered by its own chat template (the training variant
  agentune renders it with) and its ``<tool_call>`` or fenced JSON calls read from free text,
  verified the same way;
- **under evaluation**: the same closed loop on held-out scenarios, and BFCL (``fc`` mode) on a
  seeded subset of simple_python, multiple and irrelevance, scored by bfcl-eval's own checker.

The subset is seeded and the same for every model: ``--per-kind`` train scenarios of each kind
(first by a hash of their ids), ``--heldout`` held-out scenarios spread the same way, ``--bfcl``
entries per category. The response cache is a fresh folder, so every answer is generated and the
seconds per attempt are real (on 2 busy cores: run it under the heavy lock).

    flock /tmp/heavy.lock .venv/bin/python tests/benchmarks/local_models.py \\
        --per-kind 2 --heldout 8 --bfcl 20

It prints one JSON line; ``--out`` also writes every attempt's outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import benchmark_id, benchmark_template
from agentune.tasks.agent.system_prompt import system_message
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import (
    KINDS,
    ScenarioRecord,
    assign_split,
    load_scenarios,
)
from agentune.tasks.evaluate.benchmarks.bfcl.run import bfcl_suite, run_bfcl_model
from agentune.tasks.evaluate.benchmarks.bfcl.worker import bfcl_python
from agentune.tasks.llm.embedded_model import named_model_identity, resolve_model_path
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.rollouts.closed_loop import (
    NativePolicy,
    SimulatedUser,
    TrialSettings,
    native_role,
    run_trial,
    scenario_tools,
)
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.synthesize.agent_loop import Verification
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.sampling import scenario_combinations
from agentune.tasks.synthesize.stage import synthesize_trajectories
from agentune.tasks.verifier.rollout import ask_user_tool

DEMO = PROJECT_ROOT / "data" / "demo"
PLANNERS = ("kuaiagent", "react", "autogpt")
STAGE = "benchmark:local_models"


def _config(path: Path, model: str, tmp: Path, bfcl: int) -> RunConfig:
    raw = load_config(path).model_dump(mode="json")
    raw["llm"]["cache_dir"] = str(tmp / "cache")
    for role in ("teacher", "judge"):
        raw["llm"][role]["model"] = model
    raw["synthesis"].update(attempts=1, guided_attempts=0, work_dir=str(tmp / "work"))
    raw["evaluate"]["bfcl"].update(mode="fc", max_per_category=bfcl,
                                   categories=["simple_python", "multiple", "irrelevance"])
    return RunConfig.model_validate(raw)


def _ranked(scenarios: Sequence[Any], n: int, salt: str) -> list[Any]:
    return sorted(scenarios, key=lambda s: hashlib.sha256(f"{salt}:{s.id}".encode()).hexdigest())[:n]


def _subsets(config: RunConfig, per_kind: int, heldout: int, kinds: Sequence[str]
             ) -> tuple[Any, list[Any], list[Any]]:
    catalog = load_environments(DEMO / "tools.yaml",
                                implementations=config.environments.tools.implementations)
    split: dict[str, list[Any]] = defaultdict(list)
    for s in load_scenarios(DEMO / "scenarios.yaml", catalog):
        split[assign_split(s, catalog, heldout_fraction=config.scenarios.heldout_fraction,
                           seed=config.seed)].append(s)
    train = [s for kind in kinds
             for s in _ranked([s for s in split["train"] if s.kind == kind], per_kind, "train")]
    return catalog, train, _ranked(split["heldout"], heldout, "heldout")


def _by_kind(rows: Sequence[dict[str, Any]], seconds: float) -> dict[str, Any]:
    n = len(rows)
    kinds = sorted({r["kind"] for r in rows})
    return {"attempts": n, "pass_at_1": round(sum(r["passed"] for r in rows) / max(n, 1), 3),
            "by_kind": {k: f"{sum(r['passed'] for r in rows if r['kind'] == k)}/"
                           f"{sum(r['kind'] == k for r in rows)}" for k in kinds},
            "s_per_attempt": round(seconds / max(n, 1), 1), "wall_s": round(seconds, 1),
            "reasons": dict(Counter(r["reason"] for r in rows))}


async def _records(scenarios: Sequence[Any], split: str, episode: Episode) -> list[ScenarioRecord]:
    records = []
    for s in scenarios:
        run = await execute_ground_truth(s, episode)
        records.append(ScenarioRecord(s, split, episode.now, run.initial_state, run.expected_state))
    return records


async def teacher_in_grammar(config: RunConfig, catalog: Any, scenarios: Sequence[Any],
                             tmp: Path) -> tuple[list[dict[str, Any]], float]:
    """One unguided greedy synthesis attempt per scenario, step grammar on, verified."""
    cfg = config.synthesis
    ask = ask_user_tool()
    templates = {benchmark_id(name): benchmark_template(name) for name in PLANNERS}
    offered = {s.environment: (*(t.name for t in catalog.offered_tools(s.environment)), ask.name)
               for s in scenarios}
    tools = {**{t.name: t for t in catalog.training_tools()}, ask.name: ask}
    async with LLMGateway(config.llm) as gateway, executor_for(
            catalog, config.environments.tools, gateway=gateway) as executor:
        episode = Episode(catalog, executor, gateway=gateway,
                          simulation=config.environments.tools.simulation,
                          now=cfg.current_time)
        records = await _records(scenarios, "train", episode)
        plan = scenario_combinations(records, templates, offered, cfg, seed=config.seed)
        start = time.monotonic()
        done = await synthesize_trajectories(
            plan, templates, tools, executor=executor, gateway=gateway,
            settings=cfg, seed=config.seed,
            checkpoint=SynthesisCheckpoint(tmp / "work"), concurrency=cfg.concurrency,
            teacher_model=config.llm.teacher.model, attempts=1,
            verification=Verification({r.scenario.id: r for r in records}, episode,
                                      config.verifier))
        seconds = time.monotonic() - start
    rows = [{"scenario": r.stats["scenario_id"], "kind": r.stats["kind"],
             "passed": r.stats["reason"] is None, "reason": r.stats["reason"] or "passed"}
            for r in done.values()]
    return rows, seconds


async def closed_loop(config: RunConfig, catalog: Any, scenarios: Sequence[Any], split: str,
                      model: str, tmp: Path) -> tuple[list[dict[str, Any]], float]:
    """One greedy closed-loop trial per scenario, tools through the model's chat template."""
    loop = config.evaluate.closed_loop
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=loop.max_tokens,
                             max_steps=loop.max_steps, max_user_turns=loop.max_user_turns,
                             user_max_chars=config.synthesis.user_max_chars, seed=config.seed)
    student = native_role(config.llm.teacher, resolve_model_path(model),
                          cache_dir=str(tmp / "cache"))
    # The simulated user is the embedded model for every model under test.
    llm = config.llm.model_copy(update={"student": student,
                                        "teacher": config.llm.teacher.model_copy(
                                            update={"model": "embedded"})})
    profile = benchmark_template("react")
    tools_cfg = config.environments.tools
    rows: list[dict[str, Any]] = []
    async with LLMGateway(llm) as gateway, executor_for(catalog, tools_cfg,
                                                        gateway=gateway) as executor:
        episode = Episode(catalog, executor, gateway=gateway, simulation=tools_cfg.simulation,
                          now=config.evaluate.current_time, stage=STAGE)
        records = await _records(scenarios, split, episode)
        user = SimulatedUser(gateway, settings, STAGE)
        start = time.monotonic()

        async def one(record: ScenarioRecord) -> None:
            s = record.scenario
            tools = scenario_tools(catalog, s.environment)
            system = system_message(profile, s.request, tools, lang=s.lang, now=record.now)
            trial = await run_trial(record, policy=NativePolicy(gateway, "student", tools,
                                                                settings, STAGE),
                                    episode=episode, user=user, system=system,
                                    settings=settings, trial=0, group="native",
                                    verifier=config.verifier)
            reasons = list(trial.verdict.reasons)
            rows.append({"scenario": s.id, "kind": s.kind, "passed": trial.verdict.passed,
                         "reason": "passed" if trial.verdict.passed
                         else (trial.error and "error") or (reasons[0] if reasons else "failed"),
                         "calls": sum(len(m.get("tool_calls") or []) for m in trial.messages)})

        await asyncio.gather(*(one(r) for r in records))
        seconds = time.monotonic() - start
    return rows, seconds


async def bfcl(config: RunConfig, model: str, tmp: Path) -> dict[str, Any]:
    python = bfcl_python(config.evaluate.bfcl.python)
    suite = bfcl_suite(config, python)
    role = config.llm.teacher.model_copy(update={"max_concurrency": 8})
    start = time.monotonic()
    run = await run_bfcl_model(config, ArtifactStore(tmp / "store"), label=model.replace(".", "_"),
                               role=role, identity=named_model_identity(model) or {"model": model},
                               parent=None, suite=suite, python=python)
    seconds = time.monotonic() - start
    return {"categories": {c["category"]: f"{c['correct']}/{c['total']}" for c in run.categories},
            "entries": len(run.rows), "s_per_entry": round(seconds / max(len(run.rows), 1), 1)}


def measure(model: str, args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentune-local-models-") as folder:
        tmp = Path(folder)
        config = _config(args.config, model, tmp, args.bfcl)
        catalog, train, heldout = _subsets(config, args.per_kind, args.heldout, args.kinds)
        figures: dict[str, Any] = {"identity": named_model_identity(model)}
        rows, seconds = asyncio.run(teacher_in_grammar(config, catalog, train, tmp))
        figures["teacher_grammar"] = _by_kind(rows, seconds)
        out.setdefault(model, {})["teacher_grammar"] = rows
        log(model, "teacher_grammar", figures["teacher_grammar"])
        rows, seconds = asyncio.run(closed_loop(config, catalog, train, "train", model, tmp))
        figures["teacher_chat_template"] = _by_kind(rows, seconds)
        out[model]["teacher_chat_template"] = rows
        log(model, "teacher_chat_template", figures["teacher_chat_template"])
        rows, seconds = asyncio.run(closed_loop(config, catalog, heldout, "heldout", model, tmp))
        figures["heldout_closed_loop"] = _by_kind(rows, seconds)
        out[model]["heldout_closed_loop"] = rows
        log(model, "heldout_closed_loop", figures["heldout_closed_loop"])
        if args.bfcl:
            figures["bfcl_fc"] = asyncio.run(bfcl(config, model, tmp))
            log(model, "bfcl_fc", figures["bfcl_fc"])
        figures["subset"] = {"train": len(train), "heldout": len(heldout),
                             "bfcl_per_category": args.bfcl}
    return figures


def log(model: str, part: str, figures: dict[str, Any]) -> None:
    print(f"local_models: {model} {part}: {json.dumps(figures)}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["embedded", "qwen2.5-coder-0.5b"])
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "configs" / "outcome.yaml")
    parser.add_argument("--per-kind", type=int, default=2,
                        help="train scenarios of each kind (the size of the teacher runs)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS,
                        help="the scenario kinds of the train subset (default: all)")
    parser.add_argument("--heldout", type=int, default=8, help="held-out scenarios")
    parser.add_argument("--bfcl", type=int, default=20, help="BFCL entries per category (0: none)")
    parser.add_argument("--out", type=Path, help="a JSON file for every attempt's outcome")
    args = parser.parse_args(argv)
    started = time.monotonic()
    details: dict[str, Any] = {}
    line = {"benchmark": "local_models",
            "models": {m: measure(m, args, details) for m in args.models}}
    line["wall_s"] = round(time.monotonic() - started, 1)
    if args.out:
        args.out.write_text(json.dumps({"summary": line, "attempts": details}, indent=1,
                                       ensure_ascii=False, default=str), encoding="utf-8")
    print(json.dumps(line, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
