"""bfcl-eval's own checker, run by agentune (`bfcl evaluate` in its venv, the model registered at
run time): hand-written result files with known right and wrong answers get exactly the expected
per-category accuracies; the score files are read back per entry."""

from __future__ import annotations

from pathlib import Path

from agentune.tasks.evaluate.benchmarks.bfcl.generate import EntryAnswer, sample_ids
from agentune.tasks.evaluate.benchmarks.bfcl.scoring import (
    bfcl_model_name,
    read_scores,
    run_bfcl_evaluate,
    write_results,
)

from support.bfcl_answers import require_bfcl

FOLDERS = {"simple_python": "non_live", "irrelevance": "non_live",
           "multi_turn_base": "multi_turn"}
MULTI_TURN_1 = [["[ls(a=True)]", ""],
                ["[cd(folder='workspace'), mv(source='log.txt',destination='archive')]"],
                ["[cd(folder='archive'), grep(file_name='log.txt',pattern='Error')]"],
                ["[tail(file_name='log.txt',lines=20)]"]]


def test_hand_written_results_score_exactly_as_expected(tmp_path: Path) -> None:
    python = require_bfcl()
    name = bfcl_model_name("hand_written")
    assert "_" not in name  # BFCL maps "_" in a result folder back to "/"
    answers = [
        EntryAnswer("simple_python_0", "simple_python",
                    "[calculate_triangle_area(base=10, height=5)]"),          # right
        EntryAnswer("simple_python_1", "simple_python", "[math.factorial(number=6)]"),  # wrong
        EntryAnswer("simple_python_2", "simple_python", "[math.hypot(x=4, y=5)]"),  # right
        EntryAnswer("simple_python_3", "simple_python", "no call at all"),     # wrong
        EntryAnswer("irrelevance_0", "irrelevance", ""),                       # right
        EntryAnswer("irrelevance_1", "irrelevance", "[determine_body_mass_index(weight=1, "
                    "height=2)]"),                                             # wrong: a call
        EntryAnswer("multi_turn_base_1", "multi_turn_base", MULTI_TURN_1),     # right
        EntryAnswer("multi_turn_base_2", "multi_turn_base",                   # wrong: no calls
                    [[""], [""], [""], [""], [""]]),
    ]
    write_results(tmp_path, name, answers, FOLDERS)
    run_bfcl_evaluate(python, tmp_path, [{"name": name, "mode": "prompt"}], list(FOLDERS), 600)
    scores = {c.category: c for c in read_scores(tmp_path, name, list(FOLDERS),
                                                 FOLDERS).categories}
    assert {c: (s.correct, s.total) for c, s in scores.items()} == {
        "simple_python": (2, 4), "irrelevance": (1, 2), "multi_turn_base": (1, 2)}
    assert scores["simple_python"].accuracy == 0.5
    assert set(scores["simple_python"].failed) == {"simple_python_1", "simple_python_3"}
    assert set(scores["irrelevance"].failed) == {"irrelevance_1"}
    assert set(scores["multi_turn_base"].failed) == {"multi_turn_base_2"}


def test_the_subset_is_fixed_by_the_seed() -> None:
    ids = [f"simple_python_{i}" for i in range(400)]
    first = sample_ids(ids, 5, seed=0, category="simple_python")
    assert first == sample_ids(ids, 5, seed=0, category="simple_python")
    assert len(first) == 5 and first == sorted(first, key=ids.index)
    assert first != sample_ids(ids, 5, seed=1, category="simple_python")
    assert sample_ids(ids[:3], 5, seed=0, category="x") == ids[:3]
    assert sample_ids(ids, None, seed=0, category="x") == ids
