"""Does a local teacher finish its attempts? The demo's synthesis settings, unguided, on a fixed
subset of the demo's train scenarios, with a local model as teacher.

The subset: the train split of data/demo/scenarios.yaml (as build_scenarios splits it with the
demo config's seed and held-out fraction), ``AGENTUNE_BENCH_PER_KIND`` scenarios of each of the
six kinds (default 2: 12 scenarios), the first by a seeded hash of their ids, so every run and
every model gets the same ones. Each runs once (attempt 0, greedy, unguided) under the benchmark
planner template the pipeline's plan gives it (KuaiAgent, ReAct and AutoGPT: the protocols the
demo's templates use), offered its environment's tools and ``ask_user``, and is verified.

It prints one JSON line: the share of attempts that ended ``repeated_call`` (the same call made
again instead of answering), unguided pass@1, the reasons attempts ended for and the wall time.
``AGENTUNE_BENCH_TEACHER`` is the model (``embedded``, the default, or a local model folder such
as models/qwen2.5-coder-0.5b-instruct); ``AGENTUNE_BENCH_OUT`` a JSON file that receives every
attempt's steps, failures and verdict, for reading why an attempt ended as it did.

    flock /tmp/heavy.lock .venv/bin/pytest -m benchmark -s tests/benchmarks/test_teacher_finishing.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig, load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import benchmark_id, benchmark_template
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import (
    KINDS,
    ScenarioRecord,
    assign_split,
    load_scenarios,
)
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.synthesize.agent_loop import Verification
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.sampling import scenario_combinations
from agentune.tasks.synthesize.stage import synthesize_trajectories
from agentune.tasks.verifier.rollout import ask_user_tool

pytestmark = pytest.mark.benchmark

DEMO = PROJECT_ROOT / "data" / "demo"
PLANNERS = ("kuaiagent", "react", "autogpt")
TEACHER = os.environ.get("AGENTUNE_BENCH_TEACHER", "embedded")
PER_KIND = int(os.environ.get("AGENTUNE_BENCH_PER_KIND", "2"))
OUT = os.environ.get("AGENTUNE_BENCH_OUT")


def _config(tmp: Path) -> RunConfig:
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml").model_dump(mode="json")
    demo["llm"]["cache_dir"] = str(tmp / "cache")
    for role in ("teacher", "judge"):
        demo["llm"][role]["model"] = TEACHER
    demo["synthesis"].update(attempts=1, guided_attempts=0, work_dir=str(tmp / "work"))
    return RunConfig.model_validate(demo)


def _subset(config: RunConfig) -> tuple[Any, list[Any]]:
    catalog = load_environments(DEMO / "tools.yaml",
                                implementations=config.environments.tools.implementations)
    train = [s for s in load_scenarios(DEMO / "scenarios.yaml", catalog)
             if assign_split(s, catalog, heldout_fraction=config.scenarios.heldout_fraction,
                             seed=config.seed) == "train"]

    def rank(scenario_id: str) -> str:
        return hashlib.sha256(f"finishing:{scenario_id}".encode()).hexdigest()

    chosen = [s for kind in KINDS
              for s in sorted((s for s in train if s.kind == kind), key=lambda s: rank(s.id))
              [:PER_KIND]]
    return catalog, chosen


def _attempt(record: Any) -> dict[str, Any]:
    stats = record.stats
    row = stats.get("attempt_row") or {}
    return {"id": record.id, "scenario": stats["scenario_id"], "kind": stats["kind"],
            "template": stats["template_id"], "reason": stats["reason"],
            "retried": stats["retried"], "calls": stats["calls"], "steps": row.get("steps"),
            "rejects": record.rejects, "verifier_reasons": row.get("verifier_reasons")}


@pytest.mark.timeout(7200)  # minutes a scenario on 2 shared cores; the 0.5B model ~4x
def test_teacher_finishes_its_attempts(tmp_path: Path) -> None:
    config = _config(tmp_path)
    cfg = config.synthesis
    catalog, scenarios = _subset(config)
    ask = ask_user_tool()
    templates = {benchmark_id(name): benchmark_template(name) for name in PLANNERS}
    offered = {s.environment: (*(t.name for t in catalog.offered_tools(s.environment)), ask.name)
               for s in scenarios}
    tools = {**{t.name: t for t in catalog.training_tools()}, ask.name: ask}

    async def go() -> tuple[dict[str, Any], float]:
        async with LLMGateway(config.llm) as gateway, executor_for(
                catalog, config.environments.tools, gateway=gateway) as executor:
            episode = Episode(catalog, executor, gateway=gateway,
                              simulation=config.environments.tools.simulation,
                              now=cfg.current_time)
            records = []
            for s in scenarios:
                run = await execute_ground_truth(s, episode)
                records.append(ScenarioRecord(s, "train", episode.now, run.initial_state,
                                              run.expected_state))
            plan = scenario_combinations(records, templates, offered, cfg, seed=config.seed)
            start = time.monotonic()
            done = await synthesize_trajectories(
                plan, templates, tools, executor=executor, gateway=gateway,
                settings=cfg, seed=config.seed,
                checkpoint=SynthesisCheckpoint(tmp_path / "work"), concurrency=cfg.concurrency,
                teacher_model=TEACHER, attempts=1,
                verification=Verification({r.scenario.id: r for r in records}, episode,
                                          config.verifier))
            return done, time.monotonic() - start

    done, wall = asyncio.run(go())
    attempts = [_attempt(r) for r in done.values()]
    n = len(attempts)
    reasons = Counter(a["reason"] or "passed" for a in attempts)
    line = {"benchmark": "teacher_finishing", "teacher": TEACHER, "scenarios": len(scenarios),
            "attempts": n, "repeated_call_share": round(reasons["repeated_call"] / n, 3),
            "pass_at_1": round(reasons["passed"] / n, 3),
            "passed_by_kind": dict(Counter(a["kind"] for a in attempts if a["reason"] is None)),
            "reasons": dict(reasons),
            "step_answers_dropped": dict(Counter(r for a in attempts for r in a["retried"])),
            "wall_s": round(wall, 1)}
    if OUT:
        Path(OUT).write_text(json.dumps({"summary": line, "attempts": attempts},
                                        ensure_ascii=False, indent=1, default=str))
    print(json.dumps(line, ensure_ascii=False))
    assert n == len(scenarios)
