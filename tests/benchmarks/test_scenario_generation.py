"""Scenario generation at the outcome config's scale (issue 28): build_scenarios' work with
`configs/outcome.yaml` (the demo's 66 written scenarios, 2,000 train, 300 held-out and 100
reserved scenarios generated from the demo's recipes in sampled worlds, every ground truth run),
then the scenarios table published with its counts PNG. Prints one JSON line: wall and CPU
seconds, counts per split, the smallest kind share and the language shares of train, duplicates.

Goal: >= 2,000 train and >= 300 held-out scenarios over the three training environments in
<= 2 minutes on the project's 2-core machine; in train every kind >= 8%, zh and en each >= 40%,
no two scenarios with the same request and initial state."""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from agentune.config import load_config
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_scenarios.counts import count_rows, plot_counts
from agentune.tasks.build_scenarios.stage import build_scenario_set
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.store.artifact_store import ArtifactStore

GOAL_SECONDS, MIN_TRAIN, MIN_HELDOUT = 120, 2000, 300


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
async def test_scenario_generation_at_the_outcome_scale() -> None:
    config = load_config(PROJECT_ROOT / "configs" / "outcome.yaml")
    cfg, tools = config.scenarios, config.environments.tools
    start, cpu = time.perf_counter(), time.process_time()
    catalog = load_environments(config.environments.catalog,
                                implementations=tools.implementations)
    async with executor_for(catalog, tools) as executor:
        episode = Episode(catalog, executor, now=cfg.current_time, stage="build_scenarios")
        built = await build_scenario_set(cfg, catalog, [], episode=episode, gateway=None,  # type: ignore[arg-type]
                                         seed=config.seed)
    generated_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_counts(built.rows, Path(tmp) / "counts.png", "scenarios")
        ArtifactStore(Path(tmp) / "store").publish(
            "scenarios", built.rows, features=SCENARIO_FEATURES, files={"counts.png": png},
            stats={"counts": count_rows(built.rows)})
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu

    splits = Counter(r["split"] for r in built.rows)
    train = [r for r in built.rows if r["split"] == "train"]
    kinds, langs = Counter(r["kind"] for r in train), Counter(r["lang"] for r in train)
    keys = Counter((r["request"], json.dumps(r["initial_state"], sort_keys=True))
                   for r in built.rows)
    training_envs = {r["environment"] for r in train}
    result = {
        "benchmark": "scenario_generation", "wall_s": round(wall, 1),
        "generate_s": round(generated_s, 1), "cpu_s": round(cpu, 1),
        "splits": dict(sorted(splits.items())), "train_environments": sorted(training_envs),
        "train_kind_share_min": round(min(kinds.values()) / len(train), 3),
        "train_kinds": len(kinds),
        "train_zh_share": round(langs["zh"] / len(train), 3),
        "train_en_share": round(langs["en"] / len(train), 3),
        "duplicates": sum(n - 1 for n in keys.values()),
        "rejects": dict(Counter(r.reason for r in built.rejects)),
        "wall_vs_goal": round(wall / GOAL_SECONDS, 3),
    }
    print(json.dumps(result, ensure_ascii=False))
    assert splits["train"] >= MIN_TRAIN and splits["heldout"] >= MIN_HELDOUT
    assert len(training_envs) == 3 and len(kinds) == 6
    assert result["train_kind_share_min"] >= 0.08
    assert min(result["train_zh_share"], result["train_en_share"]) >= 0.4
    assert result["duplicates"] == 0
    assert wall <= GOAL_SECONDS
