"""The outcome experiment's own checks (tests/benchmarks/outcome.py, run by `make outcome`): the
leak check finds an evaluated id in a training artifact, the verdict follows the target's two
conditions and the seeds' spread, and the report states what was measured."""

from __future__ import annotations

from pathlib import Path

from benchmarks.outcome import SeedRun, figures, leaks, markdown, plot

from agentune.tasks.store.artifact_store import ArtifactStore


def test_an_evaluated_id_in_a_training_artifact_is_a_leak(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    scenarios = store.publish("scenarios", [
        {"id": "cal-1", "split": "train"}, {"id": "cal-2", "split": "heldout"},
        {"id": "help-1", "split": "reserved"}], params={})
    bfcl = store.publish("eval_bfcl", [{"id": "simple_python_7", "model": "base"}], params={})
    clean = store.publish("trajectories", [{"id": "t1", "scenario_id": "cal-1",
                                            "messages": "cal-2 in the text is no id"}], params={})
    assert leaks(store, [str(clean.ref)], str(scenarios.ref), [str(bfcl.ref)]) == []
    dirty = store.publish("sft_dataset", [
        {"id": "r1", "query_id": "help-1"}, {"id": "simple_python_7", "query_id": None}],
        params={"v": 2})
    assert leaks(store, [str(clean.ref), str(dirty.ref)], str(scenarios.ref),
                 [str(bfcl.ref)]) == [f"{dirty.ref}: help-1", f"{dirty.ref}: simple_python_7"]


def run(seed: int, heldout: dict[str, float], reserved: dict[str, float],
        bfcl: dict[str, float]) -> SeedRun:
    loop = [{"model": m, "split": s, "cases": 10, "pass@1": v, "pass^k": v, "reward": v}
            for s, values in (("heldout", heldout), ("reserved", reserved))
            for m, v in values.items()]
    return SeedRun(seed, "dpo", {"sft": f"model@s{seed}", "preferences": f"preferences@p{seed}",
                                 "final": f"model@d{seed}"}, loop,
                   [{"model": m, "bfcl_category": "irrelevance", "accuracy": v, "correct": 0,
                     "n": 100} for m, v in bfcl.items()], {"train sft": 60.0})


def test_the_verdict_needs_both_the_ratio_and_the_points_and_respects_the_spread() -> None:
    runs = [run(0, {"base": 0.2, "sft": 0.3, "final": 0.4}, {"base": 0.5, "sft": 0.5, "final": 0.45},
                {"base": 0.6, "sft": 0.6, "final": 0.6}),
            run(1, {"base": 0.2, "sft": 0.3, "final": 0.3}, {"base": 0.5, "sft": 0.5, "final": 0.55},
                {"base": 0.6, "sft": 0.6, "final": 0.6})]
    result = figures(runs)
    assert result["final/heldout/pass@1"] == {"mean": 0.35, "spread": 0.0707,
                                            "per_seed": [0.4, 0.3]}
    # 0.35 >= 1.5 x 0.2 and >= 0.2 + 0.10; reserved 0.5 vs 0.5 within the spread.
    assert result["target_met"] and all(result["checks"].values())
    # x1.75 but only 6 points: a base near 0 does not make a small gain count.
    low = figures([run(0, {"base": 0.08, "sft": 0.1, "final": 0.14}, {"base": 0.5, "final": 0.5},
                       {"base": 0.6, "final": 0.6})])
    assert not low["checks"]["heldout x1.5 and +10 points"] and not low["target_met"]
    # BFCL below base by more than the seeds' spread (none with one seed) fails its check.
    worse = figures([run(0, {"base": 0.2, "final": 0.5}, {"base": 0.5, "final": 0.5},
                         {"base": 0.6, "final": 0.5})])
    assert worse["checks"]["heldout x1.5 and +10 points"]
    assert not worse["checks"]["bfcl/irrelevance not below base by more than the spread"]
    assert not worse["target_met"]


def test_the_report_states_the_figures_the_versions_and_the_config(tmp_path: Path) -> None:
    runs = [run(0, {"base": 0.2, "sft": 0.25, "final": 0.3}, {"base": 0.5, "sft": 0.4, "final": 0.4},
                {"base": 0.6, "sft": 0.5, "final": 0.5})]
    runs[0].note = "seed 0: build_preferences found no pair, so no DPO ran"
    result = figures(runs)
    png = plot(result, tmp_path / "outcome.png")
    assert png.read_bytes().startswith(b"\x89PNG")
    text = markdown(result, runs, data={"synthesis": "trajectories verified: 3", "wall": {s: 1.0 for s in (
        "collect_queries", "build_scenarios", "build_templates", "synthesize", "build_dataset")},
        "outputs": {s: f"`{s}@v`" for s in ("collect_queries", "build_scenarios",
                                            "build_templates", "synthesize", "build_dataset")}},
        command="make outcome", config_text="extends: demo.yaml\n", png="outcome.png",
        wall_s=600, environment={"machine": "x86_64, 2 CPU cores", "torch": "2.x"})
    assert "| heldout/pass@1 | 20.0 ± 0.0 | 25.0 ± 0.0 | 30.0 ± 0.0 |" in text
    assert "- heldout x1.5 and +10 points: **missed**" in text
    assert "`model@d0`" in text and "extends: demo.yaml" in text and "10.0 min" in text
    assert "\n\n- seed 0: build_preferences found no pair, so no DPO ran" in text
    assert "Synthesis: trajectories verified: 3." in text
