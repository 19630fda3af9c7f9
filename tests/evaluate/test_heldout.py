"""agentune's held-out benchmark from an sft_dataset test split: samples per step, goldens,
alternatives, reflection steps, templates seen/unseen, profile samples from general rows.

``sft_dataset_rows()`` and ``template_rows()`` are reused by the other evaluation tests.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.format import load_benchmark, write_jsonl
from agentune.tasks.evaluate.benchmarks.kagentbench.heldout import (
    HeldoutInputError,
    build_heldout,
    read_trajectory,
)
from agentune.tasks.evaluate.prompt_templates import choose_templates

from support.heldout_rows import sft_dataset_rows, template_rows

NOW = datetime(2025, 6, 2, 9, 30)


def _build(**kwargs: Any):
    rows = sft_dataset_rows()
    seen = {r["template_id"] for r in rows if r["split"] == "train" and r["source"] == "agent"}
    templates, skipped = choose_templates(benchmark=["react", "kuaiagent"],
                                          template_rows=template_rows(), seen_ids=seen,
                                          unseen=kwargs.pop("unseen", 2), seed=0,
                                          origin="templates@t")
    assert skipped == []
    bench = build_heldout(rows, templates=templates, template_rows=template_rows(), now=NOW,
                          seed=0, max_queries=kwargs.pop("max_queries", None),
                          max_profile=kwargs.pop("max_profile", None), origin="sft_dataset@v")
    return bench, {s.id: s for s in bench.samples()}


def test_steps_become_samples_with_shared_history_and_alternative_goldens() -> None:
    bench, samples = _build()
    # Both zh rows share step 0 (same first call): one sample, one golden (identical call).
    step0 = samples["t1#step0"]
    assert step0.type == "plantooluse"
    assert [(g.tool_name, g.tool_args) for g in step0.goldens] == [
        ("web_search", {"query": "北京 明天 天气"})]
    assert step0.goldens[0].thought == "先搜索北京明天的天气"
    assert "t2#step0" not in samples
    # Their second calls differ, but their history is the same: two alternative goldens.
    step1 = samples["t1#step1"]
    assert {g.tool_name for g in step1.goldens} == {"get_weather"}
    assert len(step1.goldens) == 2
    assert step1.raw["memory_last_task"] == {"tool_name": "web_search",
                                             "tool_args": {"query": "北京 明天 天气"}}
    # Different final histories: two concluding samples.
    assert samples["t1#answer"].goldens[0].result == "北京明天小雨，18度，建议带伞。"
    assert samples["t2#answer"].goldens[0].result == "明天北京有小雨，要带伞。"
    assert step0.lang == "zh" and step0.query_id == "q-zh"


def test_a_failed_call_makes_the_next_step_a_reflection() -> None:
    _, samples = _build()
    assert samples["t3#step0"].type == "plantooluse"
    reflection = samples["t3#step1"]
    assert reflection.type == "reflextion"
    assert reflection.memory_last_task == ("get_weather", {"city": "Pari"})
    assert reflection.goldens[0].tool_args == {"city": "Paris"}


def test_prompts_under_several_templates_with_seen_and_unseen_marked() -> None:
    _, samples = _build()
    step0 = samples["t1#step0"]
    keys = set(step0.prompts)
    # Rendered: ReACT and KuaiAgent (benchmark) + the unseen Meta-Agent template; plus the
    # rows' own templates as written in the dataset (bench-react is rendered already; tpl-seen
    # joins with its dataset prompt).
    assert keys == {"ReACT", "KuaiAgent", "tpl-unseen", "tpl-seen"}
    assert step0.templates["ReACT"].seen and not step0.templates["KuaiAgent"].seen
    assert step0.templates["tpl-unseen"].seen is False
    assert step0.templates["tpl-unseen"].protocol == "toolllama"
    assert step0.templates["tpl-seen"].seen and step0.templates["tpl-seen"].protocol == "kuaiagent"
    assert step0.prompts["tpl-seen"] == "[tpl-seen] step 0: 北京明天天气怎么样？要带伞吗？"
    assert "北京明天天气怎么样" in step0.prompts["ReACT"]
    assert "web_search" in step0.prompts["ReACT"]  # the tools are in the prompt
    # Step 1's prompts show step 0's call and result in the memory section.
    step1 = samples["t1#step1"]
    assert "北京明天有雨" in step1.prompts["ReACT"]
    assert "北京明天有雨" in step1.memory_sections["ReACT"]
    assert step1.memory_sections["ReACT"] in step1.prompts["ReACT"]
    # KuaiAgent answers through its concluder: the concluding prompt is the concluder's.
    answer = samples["t1#answer"]
    assert "Write a helpful answer" in answer.prompts["KuaiAgent"] or \
        "请给出对用户有帮助的回答" in answer.prompts["KuaiAgent"]
    assert "tpl-dropped" not in keys


def test_own_answer_prompts_are_the_concluders_else_the_planners_finishing_step() -> None:
    _, samples = _build()
    assert samples["t2#answer"].prompts["tpl-seen"] == \
        "[tpl-seen] conclude: 北京明天天气怎么样？要带伞吗？"
    assert samples["t3#answer"].prompts["AutoGPT"] == \
        "[bench-autogpt] finish: What is the weather in Paris?"
    assert samples["t3#step1"].prompts["AutoGPT"] == \
        "[bench-autogpt] step 1: What is the weather in Paris?"


def test_no_tool_queries_give_only_an_answer_sample_and_general_rows_profile_samples() -> None:
    _, samples = _build()
    assert [k for k in samples if k.startswith("t4")] == ["t4#answer"]
    assert samples["g1#profile"].type == "profile"
    assert samples["g1#profile"].prompts == {"prompt": "Name a prime number."}
    assert samples["g1#profile"].goldens[0].result == "7 is a prime number."
    assert "g3#profile" not in samples  # train split


def test_caps_keep_both_languages_and_the_file_round_trips(tmp_path) -> None:
    bench, samples = _build(max_queries=2, max_profile=1, unseen=0)
    assert {s.query_id for s in samples.values() if s.type != "profile"} in (
        {"q-zh", "q-en"}, {"q-zh", "q-none"})
    assert sum(s.type == "profile" for s in samples.values()) == 1
    path = write_jsonl(tmp_path / "bench.jsonl", bench.lines)
    again = load_benchmark(path)
    assert [s.id for s in again.samples] == list(samples)


def test_building_twice_gives_the_same_lines() -> None:
    first, _ = _build()
    second, _ = _build()
    assert first.lines == second.lines


def test_a_row_without_query_is_an_error_naming_it() -> None:
    row = sft_dataset_rows()[2]
    row["messages"] = [m for m in row["messages"] if m["role"] != "user"]
    with pytest.raises(HeldoutInputError, match=r"sft_dataset@v row 't1': field 'messages'"):
        read_trajectory(row, "sft_dataset@v")
