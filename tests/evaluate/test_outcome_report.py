"""The outcome experiment's own checks (tests/benchmarks/outcome.py, run by `make outcome`): the
leak check, the bootstrap intervals, the figures and the verdict, and the report states what was
measured and what was reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.outcome import (
    Evaluation,
    Ledger,
    SeedRun,
    Timing,
    bfcl_ids,
    bootstrap,
    computing_time,
    cuts,
    data_figures,
    figures,
    leaks,
    markdown,
    merge,
    plot,
    read_evaluation,
    summary,
)

from agentune.config import load_config
from agentune.tasks.store.artifact_store import ArtifactStore


def scenario(id_: str, split: str, request: str) -> dict:
    return {"id": id_, "split": split, "request": request}


def test_leaks_names_ids_request_texts_and_train_requests(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    scenarios = str(store.publish("scenarios", [
        scenario("t1", "train", "Book a flight to Paris for Ana."),
        scenario("t2", "train", "What is on my calendar   on Friday?"),
        scenario("h1", "heldout", "What is on my calendar on Friday?"),
        scenario("n1", "natural", "帮我查一下6月6日从北京飞上海的航班。"),
        scenario("r1", "reserved", "Reset the password of user 7."),
    ]).ref)
    clean = str(store.publish("sft_dataset", [
        {"id": "a", "query_id": "t1", "messages": [{"role": "user", "content": "Book a "
                                                    "flight to Paris for Ana."}]}]).ref)
    dirty = str(store.publish("attempts", [
        {"id": "b", "scenario_id": "r1", "messages": [
            {"role": "system", "content": "x"},
            {"role": "user", "content": "Task:\n帮我查一下6月6日从北京飞上海的航班。\nGo."}]}]).ref)
    found = leaks(store, [clean, dirty], scenarios)
    assert f"{scenarios} train t2: the request of h1" in found  # whitespace does not hide it
    assert f"{dirty}: id r1" in found and f"{dirty}: the request of n1" in found
    assert not [line for line in found if line.startswith(clean)]
    assert len(found) == 3
    bfcl = str(store.publish("eval_bfcl", [{"id": "a", "model": "base", "category": "multiple",
                                            "correct": True}]).ref)
    scored = read_evaluation(store, {"eval_bfcl:base": bfcl}, "base")
    assert bfcl_ids(store, scored) == {"a"}
    assert f"{clean}: id a" in leaks(store, [clean], scenarios, bfcl_ids(store, scored))


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_items() -> None:
    assert bootstrap([[1.0] * 20]) == (1.0, 1.0)
    few = bootstrap([[1.0, 0.0] * 10])
    many = bootstrap([[1.0, 0.0] * 200])
    assert few[0] < 0.5 < few[1] and many[0] < 0.5 < many[1]
    assert many[1] - many[0] < few[1] - few[0]
    assert bootstrap([[1.0, 0.0] * 10]) == few  # seeded: the same every time
    # Several seeds: the interval of their mean, items drawn alike for each.
    low, high = bootstrap([[1.0] * 10 + [0.0] * 10, [1.0] * 20])
    assert low < 0.75 < high


def test_summary_spreads_over_seeds_and_refuses_different_items() -> None:
    one = summary([{"a": 1.0, "b": 0.0}])
    assert (one["mean"], one["spread"], one["n"]) == (0.5, 0.0, 2)
    two = summary([{"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 1.0}])
    assert two["mean"] == 0.75 and two["spread"] == pytest.approx(0.3536, abs=1e-4)
    assert two["per_seed"] == [0.5, 1.0]
    assert summary([])["mean"] is None
    with pytest.raises(SystemExit, match="different items"):
        summary([{"a": 1.0}, {"b": 1.0}])


def outcomes(passed: int, total: int) -> dict[str, float]:
    return {f"s{i:03d}": float(i < passed) for i in range(total)}


def evaluation(models: dict[str, tuple[int, int, int]]) -> Evaluation:
    """label -> (natural passed, heldout passed, bfcl simple_python correct), of 100 each."""
    return Evaluation(
        closed_loop={m: {"natural": outcomes(n, 100), "heldout": outcomes(h, 100),
                         "reserved": outcomes(20, 100)} for m, (n, h, _) in models.items()},
        bfcl={m: {"simple_python": outcomes(b, 100)} for m, (_, _, b) in models.items()},
        versions={})


def seeds(final: list[tuple[int, int, int]]) -> list[SeedRun]:
    return [SeedRun(i, "dpo", {}, evaluation({"sft": f, "final": f})) for i, f in enumerate(final)]


def test_the_target_needs_the_ratio_the_points_and_intervals_apart() -> None:
    reference = evaluation({"base": (20, 30, 10), "teacher": (60, 60, 80)})
    met = figures(reference, seeds([(50, 60, 25), (52, 62, 20), (48, 58, 22)]))
    assert met["target_met"] and met["final/heldout/pass@1"]["mean"] == 0.6
    assert met["base/heldout/pass@1"]["spread"] == 0.0  # evaluated once
    assert met["stretch"] == {"bfcl/simple_python +10 points": True}
    assert met["teacher/bfcl/simple_python"]["mean"] == 0.8
    # 1.5x and +10 points on heldout, but 100 scenarios leave the intervals overlapping.
    close = figures(reference, seeds([(50, 46, 10)] * 3))
    assert not close["checks"]["heldout x1.5 and +10 points, intervals apart"]
    assert close["checks"]["natural x1.5 and +10 points, intervals apart"]
    assert not close["target_met"]
    # A category below base by more than the spread over seeds fails the guard.
    worse = figures(reference, seeds([(50, 60, 2), (50, 60, 3), (50, 60, 4)]))
    assert not worse["checks"]["bfcl/simple_python not below base by more than the seed spread"]


def test_the_ledger_keeps_the_time_a_version_took_when_computed(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "wall.json")
    key = Ledger.key("train sft", {"model": "model@abc"})
    ledger.record(key, 301.5)
    assert Ledger(tmp_path / "wall.json").entries == {"train sft model@abc": 301.5}
    other = Ledger(tmp_path / "wall.json")
    ledger.record("evaluate base eval@1", 60.0)  # written after `other` was read ...
    other.record("train dpo model@def", 90.0)  # ... and kept by it
    assert Ledger(tmp_path / "wall.json").entries == {
        "train sft model@abc": 301.5, "evaluate base eval@1": 60.0, "train dpo model@def": 90.0}


def test_the_report_states_the_figures_the_timings_and_the_config(tmp_path: Path) -> None:
    reference = evaluation({"base": (20, 30, 10), "teacher": (60, 60, 80)})
    runs = seeds([(50, 60, 25)])
    runs[0].versions = {"sft": "model@s0", "preferences": "preferences@p0", "final": "model@d0"}
    runs[0].timings = [Timing("train sft", 4.0, True, 600.0), Timing("evaluate", 900.0, False,
                                                                     900.0)]
    runs[0].pairs, runs[0].note = 12, "seed 0: a note"
    result = figures(reference, runs)
    assert plot(result, tmp_path / "outcome.png").read_bytes().startswith(b"\x89PNG")
    stages = ("collect_queries", "build_scenarios", "build_templates", "synthesize",
              "build_dataset")
    data = {"teacher": "qwen2.5-coder-0.5b", "k_unguided": 1, "attempts": 9,
            "guided_attempts": 5, "guided_passed": 4, "trajectories": 5, "guided_trajectories": 4,
            "guided_share": 0.8, "calling_tools": 3, "sft_rows": {"agent": 5, "general": 1},
            "generated_train": 2000, "evaluated": {"natural": 100, "heldout": 100, "reserved": 100},
            "unguided_by_kind": {"single_call": {"scenarios": 4, "pass@1": 0.25, "pass@k": 0.25},
                                 "all": {"scenarios": 4, "pass@1": 0.25, "pass@k": 0.25}}}
    text = markdown(result, [Timing("evaluate", 1200.0, False, 1200.0)], runs, data=data,
                    data_timings=[Timing(s, 1.0, True, None) for s in stages],
                    cut=["SFT: 2 epoch(s)"],
                    outputs={s: {"out": f"{s}@v"} for s in stages}, command="make outcome",
                    config_text="extends: demo.yaml\n", png="outcome.png", wall_s=600,
                    environment={"machine": "x86_64, 2 CPU cores", "torch": "2.x"})
    assert "| heldout/pass@1 (100) | 30.0 [" in text and "| 60.0 [" in text
    assert "- heldout x1.5 and +10 points, intervals apart: met" in text
    assert "| single_call | 4 | 25.0 | 25.0 |" in text and "4 guided (80%)" in text
    assert "train sft reused (600 s when computed), evaluate 900 s" in text
    assert "| synthesize | reused (not timed) | `synthesize@v` |" in text
    assert "`preferences@p0` (12)" in text and "\n- seed 0: a note" in text
    assert "extends: demo.yaml" in text and "10.0 min" in text and "evaluate 1200 s" in text
    assert "## What was cut to fit the time\n\n- SFT: 2 epoch(s)\n" in text
    # 1200 + 600 + 900 s; the data stages were not timed, so the sum cannot meet the target.
    assert "summed (a run from an empty store): 0.75 h against the target of 2 h: not known; " \
           "not timed (not in the sum): collect_queries, build_scenarios" in text


def test_the_time_target_is_the_sum_of_every_piece_computed() -> None:
    pieces = [Timing("synthesize", 3.0, True, 4000.0), Timing("train sft", 3300.0, False, 3300.0)]
    assert computing_time(pieces) == (7300.0, [])
    assert computing_time([Timing("evaluate base", 2.0, True, None)]) == (0.0, ["evaluate base"])


def test_a_model_evaluated_without_bfcl_shows_no_bfcl_figure(tmp_path: Path) -> None:
    closed_loop_only = Evaluation({"teacher": {"natural": outcomes(60, 100)}}, {},
                                  {"eval_report:teacher": "eval_report@t"})
    reference = merge(evaluation({"base": (20, 30, 10)}), closed_loop_only)
    assert reference.versions == {"eval_report:teacher": "eval_report@t"}
    result = figures(reference, seeds([(50, 60, 25)]))
    assert result["teacher/bfcl/simple_python"]["mean"] is None
    assert result["teacher/natural/pass@1"]["mean"] == 0.6
    assert plot(result, tmp_path / "outcome.png").read_bytes().startswith(b"\x89PNG")


def test_an_evaluation_reads_pass_at_1_and_names_its_report_for_its_models(
        tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    rollouts = str(store.publish("eval_rollouts", [
        {"model": "sft", "scenario_id": "h1", "group": "messages", "split": "heldout",
         "trial": t, "passed": t == 1} for t in (1, 0)]).ref)  # pass@1 is the first trial's
    read = read_evaluation(store, {"eval_rollouts:messages:sft": rollouts,
                                   "eval_report": "eval_report@r"}, "sft")
    assert read.closed_loop == {"sft": {"heldout": {"h1/messages": 0.0}}}
    assert read.versions == {"eval_rollouts:messages:sft": rollouts,
                             "eval_report:sft": "eval_report@r"}


def test_pass_at_1_by_family_calls_declines_and_asks(tmp_path: Path) -> None:
    """The table the report gains: each split's items also by what a right answer does."""
    store = ArtifactStore(tmp_path)
    kinds = {"n1": "single_call", "n2": "multi_step", "n3": "irrelevant", "n4": "no_tool",
             "n5": "missing_info"}
    passed = {"n1": True, "n2": False, "n3": True, "n4": True, "n5": False}

    def rollouts(model: str) -> str:
        return str(store.publish("eval_rollouts", [
            {"model": model, "scenario_id": s, "kind": k, "group": "messages",
             "split": "natural", "trial": 0, "passed": passed[s] == (model == "base")}
            for s, k in kinds.items()], params={"model": model}).ref)

    base = read_evaluation(store, {"eval_rollouts:messages:base": rollouts("base")}, "base")
    assert base.closed_loop["base"]["natural:calling"] == {"n1/messages": 1.0,
                                                           "n2/messages": 0.0}
    assert base.closed_loop["base"]["natural:declining"] == {"n3/messages": 1.0,
                                                             "n4/messages": 1.0}
    assert base.closed_loop["base"]["natural:missing_info"] == {"n5/messages": 0.0}
    final = read_evaluation(store, {"eval_rollouts:messages:final": rollouts("final")}, "final")
    result = figures(base, [SeedRun(0, "dpo", {}, final)])
    assert result["families"]["final/natural/declining"]["mean"] == 0.0
    assert result["families"]["final/natural/missing_info"]["mean"] == 1.0
    assert result["families"]["base/heldout/calling"]["mean"] is None  # not evaluated
    data = {"teacher": "t", "k_unguided": 1, "attempts": 0, "guided_attempts": 0,
            "guided_passed": 0, "trajectories": 0, "guided_trajectories": 0, "guided_share": None,
            "calling_tools": 0, "sft_rows": {"agent": 3, "general": 1}, "generated_train": 0,
            "evaluated": {}, "unguided_by_kind": {},
            "sft_rows_by_kind": {"general": {"general_tools": 1},
                                 "irrelevant": {"flip": 1, "none": 1}, "single_call": {"none": 1}}}
    text = markdown(result, [], [], data=data, data_timings=[], cut=[], outputs={},
                    command="make outcome", config_text="", png="o.png", wall_s=60,
                    environment={"machine": "m"})
    assert "| natural | declining (2) | 100.0 [100.0, 100.0] | - | 0.0 [0.0, 0.0] | - |" in text
    assert "| natural | missing_info (1) | 0.0 [0.0, 0.0] | - | 100.0 [100.0, 100.0] | - |" in text
    assert "| kind | flip | general_tools | none | all |" in text
    assert "| irrelevant | 1 | 0 | 1 | 2 |" in text


def test_data_figures_count_the_teachers_passes_and_the_guided_share(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)

    def attempt(scenario: str, kind: str, number: int, guided: bool, passed: bool) -> dict:
        return {"scenario_id": scenario, "kind": kind, "attempt": number, "guided": guided,
                "passed": passed}

    attempts = store.publish("attempts", [
        attempt("a", "single_call", 0, False, False), attempt("a", "single_call", 1, False, True),
        attempt("b", "single_call", 0, False, True), attempt("b", "single_call", 1, False, False),
        attempt("c", "no_tool", 0, False, False), attempt("c", "no_tool", 1, False, False),
        attempt("c", "no_tool", 2, True, True)])
    trajectories = store.publish("trajectories", [
        {"source": "teacher", "guided": False, "n_tool_calls": 1},
        {"source": "teacher", "guided": False, "n_tool_calls": 2},
        {"source": "teacher", "guided": True, "n_tool_calls": 0},
        {"source": "judged_instance", "guided": False, "n_tool_calls": 1}])
    dataset = store.publish("sft_dataset", [
        {"source": "agent", "kind": "single_call", "derivation": "none"},
        {"source": "agent", "kind": "single_call", "derivation": "shuffled"},
        {"source": "agent", "kind": "irrelevant", "derivation": "flip"},
        {"source": "general", "kind": None, "derivation": "general_tools"}])
    scenarios = store.publish("scenarios", [{"split": s} for s in
                                            ("train", "train", "heldout", "natural")])
    outputs = {"synthesize": {"attempts": str(attempts.ref),
                              "trajectories": str(trajectories.ref)},
               "build_dataset": {"sft_dataset": str(dataset.ref)},
               "build_scenarios": {"scenarios": str(scenarios.ref)}}
    config = load_config("configs/outcome.yaml")
    data = data_figures(store, outputs, config)
    assert data["unguided_by_kind"] == {
        "no_tool": {"scenarios": 1, "pass@1": 0.0, "pass@k": 0.0},
        "single_call": {"scenarios": 2, "pass@1": 0.5, "pass@k": 1.0},
        "all": {"scenarios": 3, "pass@1": 0.3333, "pass@k": 0.6667}}
    assert (data["attempts"], data["guided_attempts"], data["guided_passed"]) == (7, 1, 1)
    assert (data["trajectories"], data["guided_trajectories"], data["calling_tools"]) == (3, 1, 2)
    assert data["guided_share"] == 0.3333 and data["sft_rows"] == {"agent": 3, "general": 1}
    assert data["sft_rows_by_kind"] == {"general": {"general_tools": 1},
                                        "irrelevant": {"flip": 1},
                                        "single_call": {"none": 1, "shuffled": 1}}
    assert data["generated_train"] == 2 and data["evaluated"] == {
        "natural": 1, "heldout": 1, "reserved": 0}
    assert data["teacher"] == config.llm.teacher.model


def test_what_was_cut_is_read_from_the_config_that_ran() -> None:
    config = load_config("configs/outcome.yaml").merged(
        synthesis={"max_scenarios": 40}, train={"epochs": 3, "dpo": {"max_steps": 5}})
    cut = cuts(config, ["base", "final"], 2000)
    assert cut[0].startswith("synthesis: 40 of the 2000 generated train scenarios")
    assert "SFT: 3 epoch(s)" in cut and "DPO: 5 steps" in cut
    assert cut[-1].startswith("BFCL: base, final only")
    no_student = config.merged(preferences={"student": {"enabled": False}})
    assert not [c for c in cuts(no_student, [], 2000) if "own rollouts" in c]
    assert cuts(no_student, [], 2000)[-1] == "BFCL: not run"
