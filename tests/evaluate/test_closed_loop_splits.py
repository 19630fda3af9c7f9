"""The closed loop with generated scenarios: each evaluated split (heldout, natural, reserved)
sampled on its own, spread over kinds, and summarised on its own line; train never asked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.tasks.build_scenarios.generation import GenerationPlan, generate_scenarios
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import assign_split, load_scenarios, scenario_row
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import closed_loop_inputs
from agentune.tasks.evaluate.benchmarks.closed_loop.report import closed_loop_summary
from agentune.tasks.store.artifact_store import ArtifactStore

from support.retrieval_cases import DEMO, NOW, demo_catalog


async def test_each_split_is_sampled_over_kinds_and_reported_on_its_own(tmp_path: Path) -> None:
    catalog = demo_catalog()
    async with executor_for(catalog, ToolsConfig()) as executor:
        made = await generate_scenarios(catalog, Episode(catalog, executor),
                                        GenerationPlan(60, 36, 24))
        rows = [scenario_row(g.scenario, g.split, NOW, g.run, "test") for g in made.made]
    rows += [{**s.model_dump(mode="json"), "now": NOW.isoformat(), "start_state": {},
              "expected_state": {}, "ground_truth_results": [], "verifier_version": "test",
              "split": assign_split(s, catalog, heldout_fraction=0.25, seed=0, natural=True)}
             for s in load_scenarios(DEMO / "scenarios.yaml", catalog)]
    ArtifactStore(tmp_path / "store").publish("scenarios", rows, features=SCENARIO_FEATURES)
    config = RunConfig.model_validate({"store": {"root": str(tmp_path / "store")},
                                       "evaluate": {"closed_loop": {"max_scenarios": 12}}})
    inputs = closed_loop_inputs(config, ArtifactStore(tmp_path / "store"))
    assert inputs is not None
    splits = Counter(r.split for r in inputs.records)
    assert splits == {"heldout": 12, "natural": 12, "reserved": 12}  # the default splits
    for split in splits:
        kinds = Counter(r.scenario.kind for r in inputs.records if r.split == split)
        assert len(kinds) == 6 and max(kinds.values()) == 2  # round-robin over the kinds
    trials = [{"model": "base", "split": r.split, "passed": i % 2 == 0, "reward": 0.5,
               "scenario_id": r.scenario.id, "group": "react", "trial": 0}
              for i, r in enumerate(inputs.records)]
    summary = closed_loop_summary(trials)
    assert [r["split"] for r in summary] == ["all", "heldout", "natural", "reserved"]
