"""The seed-004 tool-use metrics on hand-built answers: tool selection F1, plan success, step
efficiency, timing precision and end-to-end success, each as mean, std and count."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.format import SourceLine, parse_sample
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import ScoringOptions, score_samples
from agentune.tasks.evaluate.benchmarks.kagentbench.tool_metrics import (
    selection_f1,
    summarise,
    tool_use_values,
)

FUNCS = [{"name": "web_search", "parameters": {"properties": {"query": {}}}},
         {"name": "get_weather", "parameters": {"properties": {"city": {}}}}]


def _line(sample_id: str, sample_type: str, goldens: list[dict[str, Any]], predict: Any,
          query_id: str | None = None) -> dict[str, Any]:
    keys = list(predict) if isinstance(predict, dict) else ["prompt"]
    return {"id": sample_id, "query": "weather in Paris?", "type": sample_type,
            "golden_result_list": goldens, "funcs": FUNCS, "memory": "",
            "prompt_input": {k: "p" for k in keys}, "query_id": query_id, "lang": "en",
            "memory_last_task": {"tool_name": "None", "tool_args": {}},
            "model_predict": predict}


def _values(*lines: dict[str, Any]) -> dict[str, Any]:
    golden = [parse_sample({k: v for k, v in line.items() if k != "model_predict"},
                           SourceLine("b", i), with_prediction=False)
              for i, line in enumerate(lines)]
    predicted = [parse_sample(line, SourceLine("p", i), with_prediction=True)
                 for i, line in enumerate(lines)]
    result = score_samples(golden, predicted, ScoringOptions(tokenizer="line"))
    return summarise(tool_use_values(result, success_rouge=0.5))


def _autogpt(tool: str, args: dict[str, Any]) -> str:
    return json.dumps({"thoughts": {"text": "t"}, "command": {"name": tool, "args": args}})


def _finish(answer: str) -> str:
    return _autogpt("finish", {"response": answer})


WEATHER = {"thought": "check", "tool_name": "get_weather", "tool_args": {"city": "Paris"}}
SEARCH = {"thought": "search", "tool_name": "web_search", "tool_args": {"query": "Paris"}}
FINISHED = {"thought": "answer now", "tool_name": "None", "tool_args": {}}


def test_selection_f1_follows_the_seed_rule() -> None:
    assert selection_f1(set(), set()) == 1.0
    assert selection_f1({"a"}, set()) == 0.5
    assert selection_f1(set(), {"a"}) == 0.0
    assert selection_f1({"a", "b"}, {"a"}) == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_a_perfect_two_step_query_succeeds_end_to_end() -> None:
    metrics = _values(
        _line("s0", "plantooluse", [SEARCH], {"AutoGPT": _autogpt("web_search",
                                                                  {"query": "Paris"})}, "q"),
        _line("s1", "plantooluse", [WEATHER], {"AutoGPT": _autogpt("get_weather",
                                                                   {"city": "Paris"})}, "q"),
        _line("a", "conclusion", [{"golden_result": "It is sunny in Paris"}],
              {"AutoGPT": _finish("It is sunny in Paris")}, "q"),
    )
    for name in ("tool_selection_f1", "plan_success_rate", "step_efficiency",
                 "timing_precision", "end_to_end_success"):
        assert metrics[name].mean == pytest.approx(1.0), name
    assert metrics["plan_success_rate"].count == 2  # planning steps
    assert metrics["timing_precision"].count == 3   # every decision, the answer included
    assert metrics["tool_selection_f1"].count == 1  # one query x one template
    assert metrics["end_to_end_success"].std == 0.0


def test_wrong_tool_missing_argument_and_early_finish() -> None:
    metrics = _values(
        # Wrong tool: timing right (a call was due), plan fails, a wasted step.
        _line("w", "plantooluse", [WEATHER], {"AutoGPT": _autogpt("web_search",
                                                                  {"query": "x"})}),
        # Right tool, an argument missing: plan fails, not wasted.
        _line("m", "plantooluse", [WEATHER], {"AutoGPT": _autogpt("get_weather", {})}),
        # Finishing where a call is due: timing wrong.
        _line("f", "plantooluse", [WEATHER], {"AutoGPT": _finish("no idea")}),
    )
    assert metrics["timing_precision"].mean == pytest.approx(2 / 3)
    assert metrics["plan_success_rate"].mean == 0.0
    # Per sample (KAgentBench samples are their own queries): F1 0 (wrong tool), 1, 0 (none).
    assert metrics["tool_selection_f1"].mean == pytest.approx(1 / 3)
    # Efficiency: w 1/(1+1), m 1/1, f 1/1.
    assert metrics["step_efficiency"].mean == pytest.approx((0.5 + 1 + 1) / 3)
    assert metrics["end_to_end_success"].mean == 0.0
    assert metrics["timing_precision"].std == pytest.approx((2 / 9) ** 0.5)


def test_finishing_when_no_tool_is_needed_and_unreadable_answers() -> None:
    metrics = _values(
        _line("n", "plantooluse", [FINISHED, SEARCH], {"AutoGPT": _finish("done"),
                                                       "ReACT": "Final Answer: done"}),
        _line("x", "plantooluse", [WEATHER], {"AutoGPT": "{not json at all"}),
    )
    # "n": finishing is one of the goldens' choices (twice, two templates); "x" is unreadable.
    assert metrics["timing_precision"].mean == pytest.approx(2 / 3)
    assert metrics["plan_success_rate"].mean == pytest.approx(2 / 3)
    # "x": 1 needed step, 1 wasted (unreadable) -> 0.5.
    assert metrics["step_efficiency"].mean == pytest.approx((1 + 1 + 0.5) / 3)


def test_calling_a_tool_instead_of_answering() -> None:
    metrics = _values(_line("a", "conclusion", [{"golden_result": "It is sunny"}],
                            {"AutoGPT": _autogpt("web_search", {"query": "weather"}),
                             "KuaiAgent": "It is sunny"}))
    # AutoGPT called a tool where the answer was due; KuaiAgent's concluder writes plain text
    # (no decision to judge), so only one timing observation.
    assert metrics["timing_precision"].mean == 0.0
    assert metrics["timing_precision"].count == 1
    assert metrics["step_efficiency"].mean == pytest.approx(0.5)  # AutoGPT 0/1, KuaiAgent 1
    assert metrics["end_to_end_success"].mean == pytest.approx(0.5)
    assert metrics["tool_selection_f1"].count == 0  # no planning step: nothing to select


def test_profile_samples_take_no_part() -> None:
    metrics = _values(_line("p", "profile", [{"golden_result": "hi"}], "hi"))
    assert all(m.count == 0 and m.mean is None for m in metrics.values())
