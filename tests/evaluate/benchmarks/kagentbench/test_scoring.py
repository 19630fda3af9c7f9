"""Each KAgentBench dimension on hand-computed cases: Chinese text, empty answers, missing keys,
the reflection penalty, concluding post-processing, the official script's quirks, aggregation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.format import (
    KAgentBenchFormatError,
    SourceLine,
    parse_sample,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import (
    ScoringOptions,
    aggregate,
    format_scores,
    overall_score,
    score_samples,
)

FUNCS = [{"name": "web_search", "parameters": {"properties": {"query": {}}}},
         {"name": "get_weather", "parameters": {"properties": {"city": {}, "date": {}}}}]
LINE = SourceLine("test.jsonl", 1)
TWO_THIRDS = 2 / 3  # ROUGE-L F when 4 of 6 tokens match on both sides (p = r = 2/3)


def _sample(sample_type: str, goldens: list[dict[str, Any]], predict: Any, *,
            sample_id: str = "s1", last: dict[str, Any] | None = None) -> tuple[Any, Any]:
    keys = list(predict) if isinstance(predict, dict) else ["prompt"]
    line = {"id": sample_id, "query": "北京天气", "type": sample_type,
            "golden_result_list": goldens, "funcs": FUNCS,
            "prompt_input": {k: "p" for k in keys}, "memory": "",
            "memory_last_task": last or {"tool_name": "x", "tool_args": {}}}
    golden = parse_sample(line, LINE, with_prediction=False)
    predicted = parse_sample({**line, "model_predict": predict}, LINE, with_prediction=True)
    return golden, predicted


def _score(*pairs: tuple[Any, Any], **options: Any):
    golden = [g for g, _ in pairs]
    predicted = [p for _, p in pairs]
    return score_samples(golden, predicted, ScoringOptions(tokenizer="line", **options))


def _kuai(thought: str, tool: str, args: dict[str, Any]) -> str:
    return json.dumps({"task_name": thought, "command": {"name": tool, "args": args}},
                      ensure_ascii=False, indent=4)


STEP = {"thought": "查询北京天气", "tool_name": "get_weather",
        "tool_args": {"city": "北京", "date": "明天"}}


def test_planning_and_tool_use_with_chinese_text() -> None:
    # thought 查询上海天气 vs 查询北京天气: 2/3; tool matches; city 北京 exact (1.0), date missing.
    pair = _sample("plantooluse", [STEP],
                   {"KuaiAgent": _kuai("查询上海天气", "get_weather", {"city": "北京"})})
    result = _score(pair)
    assert result.scores.values["planning"] == pytest.approx(TWO_THIRDS, abs=1e-7)
    assert result.scores.values["tool_use"] == pytest.approx(0.5, abs=1e-7)


def test_wrong_tool_scores_nothing_and_extra_keys_cost_nothing() -> None:
    wrong = _sample("plantooluse", [STEP],
                    {"KuaiAgent": _kuai("查询北京天气", "web_search", {"query": "北京"})})
    assert _score(wrong).scores.values["planning"] == 0.0
    assert _score(wrong).scores.values["tool_use"] == 0.0
    extra = _sample("plantooluse", [STEP], {"KuaiAgent": _kuai(
        "查询北京天气", "get_weather", {"city": "北京", "date": "明天", "unit": "C"})})
    assert _score(extra).scores.values["tool_use"] == pytest.approx(1.0, abs=1e-7)


def test_argument_score_edge_cases() -> None:
    no_args = {"thought": "算一下", "tool_name": "get_weather", "tool_args": {}}
    both_empty = _sample("plantooluse", [no_args], {"KuaiAgent": _kuai("x", "get_weather", {})})
    assert _score(both_empty).scores.values["tool_use"] == 1.0
    answer_none = _sample("plantooluse", [STEP], {"KuaiAgent": _kuai("x", "get_weather", {})})
    assert _score(answer_none).scores.values["tool_use"] == 0.0
    golden_none = _sample("plantooluse", [no_args],
                          {"KuaiAgent": _kuai("x", "get_weather", {"city": "a"})})
    assert _score(golden_none).scores.values["tool_use"] == 0.0


def test_max_over_goldens_skipping_none_ones() -> None:
    goldens = [{"thought": "None", "tool_name": "get_weather", "tool_args": {"city": "北京"}},
               {"thought": "查询北京天气", "tool_name": "None", "tool_args": {}},
               STEP]
    pair = _sample("plantooluse", goldens,
                   {"KuaiAgent": _kuai("查询北京天气", "get_weather", {"city": "北京"})})
    result = _score(pair)
    # Planning skips the first two goldens (a "None" thought / tool): the third matches fully.
    assert result.scores.values["planning"] == pytest.approx(1.0, abs=1e-7)
    # Tool-use skips only the "None" tool: the first golden (city only) matches fully.
    assert result.scores.values["tool_use"] == pytest.approx(1.0, abs=1e-7)


def test_a_sample_is_the_mean_over_its_templates_empty_answers_included() -> None:
    pair = _sample("plantooluse", [STEP], {
        "KuaiAgent": _kuai("查询北京天气", "get_weather", {"city": "北京", "date": "明天"}),
        "AutoGPT": "",
        "ReACT": "Thought: 查询北京天气\nAction: get_weather\nAction Input: 北京",
    })
    result = _score(pair)
    # ReACT: the thought is "Thought: 查询北京天气": 8 tokens ("Thought", ":", 6 characters)
    # against 6, LCS 6 -> p = 6/8, r = 1; its one argument goes to the first parameter, city.
    p, r = 6 / 8, 1.0
    react_plan = 2 * p * r / (p + r + 1e-8)
    assert result.scores.values["planning"] == pytest.approx((1.0 + 0.0 + react_plan) / 3,
                                                             abs=1e-7)
    assert result.scores.values["tool_use"] == pytest.approx((1.0 + 0.0 + 0.5) / 3, abs=1e-7)


def test_reflection_penalises_goldens_that_repeat_the_failed_step() -> None:
    repeat = {"thought": "再查一次北京天气", "tool_name": "get_weather",
              "tool_args": {"city": "北京"}}
    change = {"thought": "换成搜索北京天气", "tool_name": "web_search",
              "tool_args": {"query": "北京天气"}}
    last = {"tool_name": "get_weather", "tool_args": {"city": "北京"}}
    # Repeating the failed call earns nothing even though it equals a golden.
    same = _sample("reflextion", [repeat, change],
                   {"KuaiAgent": _kuai("再查一次北京天气", "get_weather", {"city": "北京"})},
                   last=last)
    assert _score(same).scores.values["reflection"] == 0.0
    # Changing course: 0.3 x thought ROUGE + 0.7 x argument ROUGE.
    # thought 换成搜索北京天气 vs 改为搜索北京天气: 8 tokens each, LCS 6 -> 3/4.
    moved = _sample("reflextion", [repeat, change],
                    {"KuaiAgent": _kuai("改为搜索北京天气", "web_search", {"query": "北京天气"})},
                    last=last)
    thought = 2 * 0.75 * 0.75 / (1.5 + 1e-8)
    assert _score(moved).scores.values["reflection"] == pytest.approx(0.3 * thought + 0.7 * 1.0,
                                                                      abs=1e-7)


def test_reflection_without_usable_golden_scores_zero_and_is_counted() -> None:
    pair = _sample("reflextion", [{"thought": "None", "tool_name": "None", "tool_args": {}}],
                   {"KuaiAgent": _kuai("t", "web_search", {})})
    result = _score(pair)
    assert result.scores.values["reflection"] == 0.0
    assert result.anomalies == {"reflection_without_usable_golden": 1}


def test_concluding_post_processing_per_template() -> None:
    golden = [{"golden_result": "北京明天有雨"}, {"golden_result": "明天北京会下雨"}]
    pair = _sample("conclusion", golden, {
        "AutoGPT": 'finish(response="北京明天有雨")',   # text after response=" -> exact: 1
        "ToolLlama": 'Action Input: {"final_answer": "北京明天有雨"}',  # quotes/braces dropped: 1
        "ReACT": "",                                     # empty: 0
        "KuaiAgent": "web_search(北京)",                 # only AutoGPT drops web_search( answers
        "ModelScope": "明天北京会下雨",                   # the second golden: 1
    })
    result = _score(pair)
    kuai = result.items[3].scores["concluding"]
    assert 0 < kuai < 1
    assert result.scores.values["concluding"] == pytest.approx((1 + 1 + 0 + kuai + 1) / 5,
                                                               abs=1e-7)
    searching = _sample("conclusion", golden,
                        {"AutoGPT": 'web_search(query="北京明天有雨")'}, sample_id="s2")
    assert _score(searching).scores.values["concluding"] == 0.0
    newline = _sample("conclusion", golden, {"ToolLlama": "\n"}, sample_id="s3")
    assert _score(newline).scores.values["concluding"] == 0.0


def test_profile_is_max_rouge_and_empty_scores_zero() -> None:
    golden = [{"golden_result": "我是一个助手"}, {"golden_result": "I am an assistant"}]
    pair = _sample("profile", golden, "I am an assistant")
    empty = _sample("profile", golden, "", sample_id="s2")
    result = _score(pair, empty)
    assert result.scores.values["profile"] == pytest.approx(0.5, abs=1e-7)


def test_official_quirk_reuses_the_previous_templates_parse() -> None:
    right = _kuai("查询北京天气", "get_weather", {"city": "北京", "date": "明天"})
    pair = _sample("plantooluse", [STEP], {"KuaiAgent": right, "ReACT": "", "Kuaiagent": "junk"})
    official = _score(pair)
    # The empty ReACT answer and the unknown key both reuse KuaiAgent's (perfect) parse.
    assert official.scores.values["tool_use"] == pytest.approx(1.0, abs=1e-7)
    assert official.anomalies == {"previous_parse_reused": 2}
    fixed = _score(pair, quirks="fixed")
    # Fixed: empty is empty (0); "Kuaiagent" is read as KuaiAgent ("junk": nothing).
    assert fixed.scores.values["tool_use"] == pytest.approx(1 / 3, abs=1e-7)
    assert fixed.anomalies == {}


def test_quirk_with_nothing_to_reuse_reads_as_empty() -> None:
    pair = _sample("plantooluse", [STEP], {"ReACT": "", "KuaiAgent": _kuai(
        "查询北京天气", "get_weather", {"city": "北京", "date": "明天"})})
    result = _score(pair)
    assert result.anomalies == {"unbound_parse_read_as_empty": 1}
    assert result.scores.values["tool_use"] == pytest.approx(0.5, abs=1e-7)


def test_fixed_quirks_reject_a_key_nobody_knows() -> None:
    pair = _sample("plantooluse", [STEP], {"Mystery": "x"})
    with pytest.raises(KAgentBenchFormatError,
                       match=r"<predictions>:1: field 'model_predict\.Mystery': unknown template"):
        _score(pair, quirks="fixed")


def test_overall_weights_and_partial_overall() -> None:
    values = {"planning": 0.4, "tool_use": 0.5, "reflection": 0.2, "concluding": 0.6,
              "profile": 0.3}
    assert overall_score(values) == (pytest.approx(0.25 * 0.4 + 0.35 * 0.5 + 0.1 * 0.2
                                                   + 0.2 * 0.6 + 0.1 * 0.3), False)
    partial = {**values, "reflection": None, "profile": None}
    assert overall_score(partial) == (pytest.approx((0.25 * 0.4 + 0.35 * 0.5 + 0.2 * 0.6) / 0.8),
                                      True)


def test_aggregate_is_mean_over_samples_of_means_over_templates() -> None:
    first = _sample("plantooluse", [STEP], {
        "KuaiAgent": _kuai("查询北京天气", "get_weather", {"city": "北京", "date": "明天"}),
        "AutoGPT": ""}, sample_id="a")
    second = _sample("plantooluse", [STEP], {
        "KuaiAgent": _kuai("查询北京天气", "get_weather", {"city": "北京", "date": "明天"})},
        sample_id="b")
    result = _score(first, second)
    assert result.scores.values["tool_use"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-7)
    only_kuai = aggregate(result.items, lambda item: item.key == "KuaiAgent")
    assert only_kuai.values["tool_use"] == pytest.approx(1.0, abs=1e-7)
    assert result.scores.values["reflection"] is None and result.scores.partial
    text = format_scores(result.scores)
    assert "Planning" in text and "75.00" in text and "renormalised" in text
