"""build_preferences on published scenarios and attempts, with the student rolled out against a
scripted OpenAI-compatible endpoint (the right calls on even trials, a wrong tool on odd ones):
pairs from both sources, counted by source and kind, the margin histogram in the summary, the
reward's lineage in the version, and a re-run reusing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.tasks.common.schemas import ATTEMPT_FEATURES, SCENARIO_FEATURES
from agentune.tasks.environments.scenarios import GroundTruthRun, scenario_row
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import OpenAITestServer
from support.preference_data import attempt_rows
from support.scripted_agents import DEMO, Policy, demo_records, perfect, scripted, wrong_tool

SCENARIOS = ["trv-book-cheapest-flight", "cal-events-jun3", "trv-flights-bj-sh"]


@pytest.fixture(scope="module")
def demo() -> Any:
    return demo_records("train")


@pytest.fixture
def store(tmp_path: Path, demo: Any) -> ArtifactStore:
    _, records = demo
    chosen = [r for r in records if r.scenario.id in SCENARIOS]
    store = ArtifactStore(tmp_path / "store")
    rows = [scenario_row(r.scenario, "train", r.now, GroundTruthRun(
        initial_state=r.start_state, expected_state=r.expected_state), "test") for r in chosen]
    scenarios = store.publish("scenarios", rows, features=SCENARIO_FEATURES).ref
    attempts = [{k: v for k, v in row.items() if k != "variant"}
                for row in attempt_rows(SCENARIOS)]
    store.publish("attempts", attempts, parents=[scenarios], features=ATTEMPT_FEATURES)
    return store


def _config(store: ArtifactStore, base_url: str, tmp_path: Path) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(store.root)},
        "environments": {"catalog": str(DEMO / "tools.yaml")},
        "llm": {"cache_dir": str(tmp_path / "cache"),
                "teacher": {"provider": "openai", "model": "scripted", "base_url": base_url,
                            "api_key_env": "SCRIPTED_KEY"}},
        "reward": {"functions": ["verifier", {"name": "format", "weight": 0.5}]},
        "preferences": {"min_margin": 0.1, "student": {
            "enabled": True, "provider": "openai", "model": "scripted", "base_url": base_url,
            "api_key_env": "SCRIPTED_KEY", "samples": 2, "temperature": 1.0}},
    })


async def test_pairs_from_attempts_and_student_rollouts(prefect_api: None, store: ArtifactStore,
                                                        tmp_path: Path, demo: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentune.flows.build_preferences import build_preferences

    catalog, records = demo
    chosen = [r for r in records if r.scenario.id in SCENARIOS]
    monkeypatch.setenv("SCRIPTED_KEY", "test")

    def alternating(body: dict[str, Any]) -> Policy:
        return perfect if (body.get("seed") or 0) // 1000 % 2 == 0 else wrong_tool

    with OpenAITestServer(scripted(chosen, catalog, alternating)) as server:
        config = _config(store, server.base_url, tmp_path)
        out = await build_preferences(config=config)
        ref = store.resolve(out["outputs"]["preferences"])
        manifest = store.manifest(ref)
        rows = store.read(ref).to_dict("records")
        stats = manifest.stats
        assert stats["by_source"]["attempts"] > 0 and stats["by_source"]["student"] > 0
        assert stats["student"]["rollouts"] == 2 * len(SCENARIOS)
        assert stats["student"]["passed"] == len(SCENARIOS)  # the even trials
        assert set(stats["by_kind"]) <= {"single_call", "multi_step"}
        assert sum(b["pairs"] for b in stats["margin_histogram"]) == len(rows) == stats["pairs"]
        metrics = {r["metric"] for r in stats["summary"]}
        assert {"pairs from student", "pairs from attempts", "skipped: below_margin"} <= metrics
        assert any(m.startswith("margin [") for m in metrics)
        assert store.file(ref, "margins.png").stat().st_size > 1000
        # The reward's terms and versions are in the version's parameters.
        assert [t["name"] for t in manifest.params["reward"]] == ["verifier", "format"]
        assert sorted(p["name"] for p in manifest.parents) == ["attempts", "scenarios"]
        for row in rows:
            assert row["margin"] >= 0.1 - 1e-9
            assert row["chosen_reward"] - row["rejected_reward"] == pytest.approx(row["margin"])
            assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
            assert "reward:verifier" in row["chosen_components"]
        student = [r for r in rows if r["source"] == "student"]
        # The student's right trajectory is chosen over its wrong-tool one, at the first call,
        # after the system message its SFT rows open with (react's Profile and the clock).
        assert all(r["chosen_id"].endswith(".s0") and r["decision"] == 2 for r in student)
        assert all(r["prompt"][0]["role"] == "system" and "2025-06-02" in r["prompt"][0]["content"]
                   for r in student)

        again = await build_preferences(config=config)
        assert again["reused"] and again["outputs"] == out["outputs"]
