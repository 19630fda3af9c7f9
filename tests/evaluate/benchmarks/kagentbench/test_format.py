"""Reading KAgentBench benchmark and prediction files: every problem names file, line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    KAgentBenchFormatError,
    load_benchmark,
    load_predictions,
    write_jsonl,
)

PLAN: dict[str, Any] = {
    "id": "p1", "query": "北京天气", "type": "plantooluse",
    "golden_result_list": [{"thought": "查", "tool_name": "get_weather",
                            "tool_args": {"city": "北京"}}],
    "funcs": [{"name": "get_weather", "parameters": {"properties": {"city": {}}}}],
    "prompt_input": {"ReACT": "p", "AutoGPT": "p"}, "memory": "", "memory_type": "task",
    "memory_last_task": {"tool_name": "None", "tool_args": {}},
}
PROFILE: dict[str, Any] = {"id": 2, "query": "你是谁", "type": "profile",
                           "golden_result_list": [{"golden_result": "助手"}],
                           "prompt_input": {"prompt": "你是谁"}, "memory": ""}


def _write(tmp_path: Path, name: str, lines: list[Any]) -> Path:
    path = tmp_path / name
    texts = [line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)
             for line in lines]
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"b.jsonl:2: not valid JSON"),
    ([1, 2], r"b.jsonl:2: a line must be a JSON object, got list"),
    ({**PLAN, "type": "planning"}, r"b.jsonl:2: field 'type': 'planning' is not one of"),
    ({**PLAN, "id": True}, r"b.jsonl:2: field 'id': must be str or int, got bool"),
    ({k: v for k, v in PLAN.items() if k != "query"}, r"b.jsonl:2: field 'query': missing"),
    ({**PLAN, "golden_result_list": [{"thought": "t"}]},
     r"field 'golden_result_list\[0\].tool_name': missing"),
    ({**PLAN, "golden_result_list": [{"thought": "t", "tool_name": "x", "tool_args": "a=1"}]},
     r"field 'golden_result_list\[0\].tool_args': must be an object, got str"),
    ({**PLAN, "funcs": [{"description": "no name"}]}, r"field 'funcs\[0\].name': missing"),
    ({**PLAN, "type": "reflextion", "memory_last_task": None},
     r"field 'memory_last_task': missing \(reflextion samples need it\)"),
    ({**PROFILE, "golden_result_list": [{"result": "x"}]},
     r"field 'golden_result_list\[0\].golden_result': missing"),
    ({**PROFILE, "prompt_input": {"ReACT": "x"}}, r"field 'prompt_input': a profile sample"),
    ({**PLAN, "prompt_input": {"ReACT": 5}}, r"field 'prompt_input.ReACT': must be a string"),
])
def test_bad_benchmark_lines(tmp_path: Path, line: Any, message: str) -> None:
    path = _write(tmp_path, "b.jsonl", [PROFILE, line])
    with pytest.raises(KAgentBenchFormatError, match=message):
        load_benchmark(path)


def test_a_golden_without_a_tool_may_have_any_arguments(tmp_path: Path) -> None:
    line = {**PLAN, "golden_result_list": [{"thought": "t", "tool_name": "None",
                                            "tool_args": "none"}]}
    sample = load_benchmark(_write(tmp_path, "b.jsonl", [line])).samples[0]
    assert sample.goldens[0].tool_args == {}


def test_duplicates_keep_the_last_line_and_are_counted(tmp_path: Path) -> None:
    second = {**PLAN, "query": "上海天气"}
    bench = load_benchmark(_write(tmp_path, "b.jsonl", [PLAN, PROFILE, second]))
    assert bench.duplicates == 1
    assert [s.query for s in bench.samples] == ["你是谁", "上海天气"]


@pytest.mark.parametrize(("prediction", "message"), [
    ({**PLAN, "model_predict": {}}, r"p.jsonl:1: field 'model_predict': must be a non-empty"),
    ({**PLAN, "model_predict": {"ReACT": None}},
     r"p.jsonl:1: field 'model_predict.ReACT': must be a string, got null"),
    ({**PLAN, "model_predict": {"ModelScope": "x"}},
     r"p.jsonl:1: field 'model_predict': template key\(s\) \['ModelScope'\] are not in"),
    ({**PLAN, "id": "p9", "model_predict": {"ReACT": "x"}},
     r"p.jsonl:1: field 'id': plantooluse sample 'p9' is not in"),
])
def test_bad_prediction_lines(tmp_path: Path, prediction: Any, message: str) -> None:
    bench = write_jsonl(tmp_path / "b.jsonl", [PLAN, PROFILE])
    preds = _write(tmp_path, "p.jsonl", [prediction, {**PROFILE, "model_predict": "我是助手"}])
    with pytest.raises(KAgentBenchFormatError, match=message):
        load_predictions(bench, preds)


def test_every_sample_needs_a_prediction(tmp_path: Path) -> None:
    bench = write_jsonl(tmp_path / "b.jsonl", [PLAN, PROFILE])
    preds = _write(tmp_path, "p.jsonl", [{**PROFILE, "model_predict": {"prompt": "x"}}])
    with pytest.raises(KAgentBenchFormatError, match="a profile prediction must be a string"):
        load_predictions(bench, preds)
    preds = _write(tmp_path, "p.jsonl", [{**PROFILE, "model_predict": "x"}])
    with pytest.raises(KAgentBenchFormatError,
                       match=r"1 benchmark sample\(s\) have no prediction, the first: "
                             r"plantooluse 'p1' \(.*b.jsonl:1\)"):
        load_predictions(bench, preds)


def test_a_prediction_may_leave_a_template_out(tmp_path: Path) -> None:
    bench = write_jsonl(tmp_path / "b.jsonl", [PLAN])
    preds = _write(tmp_path, "p.jsonl", [{**PLAN, "model_predict": {"AutoGPT": "x"}}])
    _, predictions = load_predictions(bench, preds)
    assert predictions.samples[0].prediction == {"AutoGPT": "x"}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KAgentBenchFormatError, match="nope.jsonl: file not found"):
        load_benchmark(tmp_path / "nope.jsonl")


def test_memory_last_task_is_read_on_reflextion_lines_only(tmp_path: Path) -> None:
    """``{}`` is the format's default: the official script never reads it outside reflextion,
    so such a line loads (and scores) as if the field held a task."""
    from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import ScoringOptions, score_samples

    empty = {**PLAN, "memory_last_task": {}}
    bench = load_benchmark(_write(tmp_path, "b.jsonl", [empty, {**PROFILE, "id": 3,
                                                                 "memory_last_task": {}}]))
    assert [s.memory_last_task for s in bench.samples] == [None, None]
    answer = 'Thought: 查\nAction: get_weather\nAction Input: {"city": "北京"}'
    scores = []
    for name, line in (("empty", empty), ("full", PLAN)):
        golden = _write(tmp_path, f"{name}.jsonl", [line])
        predicted = _write(tmp_path, f"{name}-p.jsonl",
                           [{**line, "model_predict": {"ReACT": answer, "AutoGPT": ""}}])
        bench, preds = load_predictions(golden, predicted)
        scores.append(score_samples(bench.samples, preds.samples, ScoringOptions(),
                                    str(predicted)).scores.values)
    assert scores[0] == scores[1] and scores[0]["tool_use"] > 0
    with pytest.raises(KAgentBenchFormatError,
                       match=r"field 'memory_last_task.tool_name': missing"):
        load_benchmark(_write(tmp_path, "r.jsonl", [{**empty, "type": "reflextion"}]))
