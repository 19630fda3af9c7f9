"""Generated KAgentBench-format files scored end to end, and the generator itself.

``make_kagentbench(n)`` writes a benchmark and a prediction file in the official format: every
sample type, zh and en text, one to five goldens (some ``"None"``), the five template keys, and
answers ranging from golden copies through paraphrases, wrong tools and missing keys to the
malformed output the official parser has to repair (bare keys, bad escapes, open braces, prose
around JSON, code fences) and empty answers. With ``crashers=False`` (the default) it avoids what
makes the official script crash, so its numbers can be compared with the script's. The
benchmark in ``tests/benchmarks/test_kagentbench_scoring.py`` reuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentune.cli import main
from agentune.tasks.evaluate.benchmarks.kagentbench.format import load_predictions
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import ScoringOptions, score_files

from support.kagentbench_files import make_kagentbench

# The official evaluator (KwaiKEG/KwaiAgents benchmark/benchmark_eval.py, the version after the
# fix of its issue #15) run on make_kagentbench(n=400, seed=7), tokenising each text as one line
# (no punkt installed): the numbers it printed at full precision.
OFFICIAL_ON_SEED_7 = {
    "planning": 0.3254281085580856,
    "tool_use": 0.526650828659418,
    "reflection": 0.4025295591106666,
    "concluding": 0.6216291598078817,
    "profile": 0.6857577457548528,
    "overall": 0.498839379618446,
}


def test_generated_file_is_valid_and_scored_end_to_end(tmp_path: Path) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, 120, seed=3)
    bench, predictions = load_predictions(bench_path, preds_path)
    assert len(bench.samples) == len(predictions.samples) == 120
    result = score_files(bench_path, preds_path, ScoringOptions(tokenizer="line"))
    values = result.scores.values
    assert all(0 < values[d] < 1 for d in ("planning", "tool_use", "concluding", "profile"))
    assert values["overall"] == pytest.approx(
        0.25 * values["planning"] + 0.35 * values["tool_use"] + 0.1 * values["reflection"]
        + 0.2 * values["concluding"] + 0.1 * values["profile"])
    # Every template answer of every sample is an item; profile samples have one.
    expected_items = sum(len(s.prediction) if isinstance(s.prediction, dict) else 1
                         for s in predictions.samples)
    assert len(result.items) == expected_items


def test_official_numbers_on_the_seeded_file(tmp_path: Path) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, 400, seed=7)
    result = score_files(bench_path, preds_path, ScoringOptions(tokenizer="line"))
    for name, expected in OFFICIAL_ON_SEED_7.items():
        assert result.scores.values[name] == pytest.approx(expected, abs=1e-9), name
    assert not result.scores.partial


def test_agentune_parser_reads_more_of_the_malformed_answers(tmp_path: Path) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, 300, seed=5)
    official = score_files(bench_path, preds_path, ScoringOptions(tokenizer="line"))
    lenient = score_files(bench_path, preds_path,
                          ScoringOptions(parser="agentune", tokenizer="line"))
    assert lenient.scores.values["tool_use"] > official.scores.values["tool_use"]
    # Concluding and profile answers are not parsed by templates' planners: same numbers for
    # the plain-text ones.
    assert lenient.scores.values["profile"] == official.scores.values["profile"]


def test_cli_prints_the_six_numbers_and_full_precision_json(tmp_path: Path, capsys) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, 60, seed=11)
    expected = score_files(bench_path, preds_path, ScoringOptions(tokenizer="line")).scores
    assert main(["score-kagentbench", str(bench_path), str(preds_path),
                 "--tokenizer", "line"]) == 0
    out = capsys.readouterr().out
    for name in ("Planning", "Tool-use", "Reflection", "Concluding", "Profile", "Overall"):
        assert name in out
    assert f"{100 * expected.values['overall']:.2f}" in out
    assert main(["score-kagentbench", str(bench_path), str(preds_path), "--json",
                 "--tokenizer", "line"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["overall"] == expected.values["overall"]
    assert set(data["tool_metrics"]) >= {"tool_selection_f1", "plan_success_rate",
                                         "step_efficiency", "timing_precision",
                                         "end_to_end_success"}
    assert set(data["tool_metrics"]["timing_precision"]) == {"mean", "std", "count"}


def test_cli_names_file_line_and_field_of_bad_input(tmp_path: Path, capsys) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, 10, seed=1)
    lines = preds_path.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[3])
    del broken["model_predict"]
    lines[3] = json.dumps(broken, ensure_ascii=False)
    preds_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["score-kagentbench", str(bench_path), str(preds_path)]) == 2
    err = capsys.readouterr().err
    assert f"{preds_path}:4: field 'model_predict': missing" in err
