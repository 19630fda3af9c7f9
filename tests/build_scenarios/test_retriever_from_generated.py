"""The retriever learns from generated scenarios: train_retriever's pairs come from the generated
train split only (thousands of requests instead of the written 42), and both train_retriever and
evaluate report recall on each evaluation split (heldout, natural, reserved) on its own line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.flows.train_retriever import train_retriever
from agentune.tasks.build_scenarios.generation import GenerationPlan, generate_scenarios
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import assign_split, load_scenarios, scenario_row
from agentune.tasks.evaluate.benchmarks.tool_retrieval.benchmark import evaluate_retrieval
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.tool_retrieval.pairs import RetrievalCase

from support.retrieval_cases import DEMO, NOW, demo_catalog, tiny_encoder_folder


@pytest.mark.slow
async def test_pairs_come_from_generated_train_and_each_split_is_reported(prefect_api,
                                                                         tmp_path: Path) -> None:
    catalog = demo_catalog()
    written = load_scenarios(DEMO / "scenarios.yaml", catalog)
    async with executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor)
        made = await generate_scenarios(catalog, episode, GenerationPlan(240, 60, 24))
        rows = [scenario_row(g.scenario, g.split, NOW, g.run, "test") for g in made.made]
    rows += [{**s.model_dump(mode="json"), "now": NOW.isoformat(), "start_state": {},
              "expected_state": {}, "ground_truth_results": [], "verifier_version": "test",
              "split": assign_split(s, catalog, heldout_fraction=0.25, seed=0, natural=True)}
             for s in written]
    store = ArtifactStore(tmp_path / "store")
    store.publish("scenarios", rows, features=SCENARIO_FEATURES)
    cases = [RetrievalCase(r["id"], r["request"], r["lang"], (), r["split"], "scenario")
             for r in rows]
    tiny = tiny_encoder_folder(tmp_path / "tiny", catalog, cases)
    config = RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")},
        "environments": {"catalog": str(DEMO / "tools.yaml")},
        "train_retriever": {"base_model": str(tiny), "max_steps": 2, "batch_size": 8,
                            "learning_rate": 1e-3, "work_dir": str(tmp_path / "runs")},
        "evaluate": {"retrieval": {"catalog_sizes": []}}})
    result = await train_retriever(config=config)
    pairs = store.read("retriever")
    train = {r["request"] for r in rows if r["split"] == "train"}
    assert set(pairs["anchor"]) <= train and len(set(pairs["anchor"])) > 100
    summary = {r["what"]: r["value"] for r in result["summary"]}
    assert {f"{s} recall@5 hybrid" for s in ("heldout", "natural", "reserved")} <= set(summary)
    evaluation = evaluate_retrieval(config, store)
    assert evaluation is not None
    per_split = {(r["catalog"], r["retriever"]) for r in evaluation.scores.rows}
    assert {(f"as written, {s}", "hybrid") for s in ("heldout", "natural", "reserved")} <= per_split
