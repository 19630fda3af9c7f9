"""agentune's held-out benchmark from an sft_dataset test split: samples per step, goldens,
alternatives, reflection steps, templates seen/unseen, profile samples from general rows.

``sft_dataset_rows()`` and ``template_rows()`` are reused by the other evaluation tests.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from agentune.tasks.eval_benchmark import (
    HeldoutInputError,
    build_heldout,
    choose_templates,
    read_trajectory,
)
from agentune.tasks.kagentbench_format import write_jsonl, load_benchmark
from agentune.tasks.prompt_templates import compose_template

NOW = datetime(2025, 6, 2, 9, 30)
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "date": {"type": "string"}},
                   "required": ["city"]}}}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _agent_row(row_id: str, query_id: str, split: str, template_id: str, lang: str,
               query: str, calls: list[tuple[str, str, dict[str, Any], str]],
               answer: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                      {"role": "user", "content": query}]
    steps = []
    for k, (thought, tool, args, observation) in enumerate(calls):
        messages.append({"role": "assistant", "content": thought,
                         "tool_calls": [_call(f"{row_id}-c{k}", tool, args)]})
        messages.append({"role": "tool", "tool_call_id": f"{row_id}-c{k}",
                         "content": observation})
        steps.append({"step": k, "kind": "plan", "prompt": f"[{template_id}] step {k}: {query}",
                      "completion": thought})
    messages.append({"role": "assistant", "content": answer})
    # As synthesis writes them: the planner's finishing step, then a two-stage protocol's
    # concluder step.
    steps.append({"step": len(calls), "kind": "plan",
                  "prompt": f"[{template_id}] finish: {query}", "completion": answer})
    if template_id == "tpl-seen":  # a KuaiAgent template
        steps.append({"step": len(calls) + 1, "kind": "conclude",
                      "prompt": f"[{template_id}] conclude: {query}", "completion": answer})
    return {"id": row_id, "split": split, "source": "agent", "query_id": query_id,
            "set_id": f"set-{query_id}", "template_id": template_id,
            "template_source": "benchmark" if template_id.startswith("bench-") else "meta-agent",
            "task_type": "multi_step_planning", "lang": lang, "messages": messages,
            "tools": [SEARCH, WEATHER], "steps": steps, "cluster_id": row_id, "n_tokens": 100}


def _general_row(row_id: str, split: str, lang: str, prompt: str, answer: str) -> dict[str, Any]:
    return {"id": row_id, "split": split, "source": "general", "query_id": None, "set_id": None,
            "template_id": None, "template_source": None, "task_type": "general", "lang": lang,
            "messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": answer}],
            "tools": [], "steps": [{"step": 0, "kind": "conclude", "prompt": prompt,
                                    "completion": answer}],
            "cluster_id": row_id, "n_tokens": 20}


def sft_dataset_rows() -> list[dict[str, Any]]:
    """Train rows (they make bench-react and tpl-seen "seen"), and a test split with: a zh query
    answered twice (two templates) with the same first call and different second calls; an en
    query whose first call fails (its second step is a reflection); an en query needing no tool;
    two general rows."""
    error = json.dumps({"error": "city not found", "city": "Pari"})
    return [
        _agent_row("tr1", "q-train", "train", "bench-react", "en", "weather in Oslo?",
                   [("look it up", "get_weather", {"city": "Oslo"}, "rain")], "It rains."),
        _agent_row("tr2", "q-train2", "train", "tpl-seen", "zh", "上海天气？",
                   [("查天气", "get_weather", {"city": "上海"}, "晴")], "晴天。"),
        _agent_row("t1", "q-zh", "test", "bench-react", "zh", "北京明天天气怎么样？要带伞吗？",
                   [("先搜索北京明天的天气", "web_search", {"query": "北京 明天 天气"},
                     "北京明天有雨"),
                    ("查询北京的天气预报", "get_weather", {"city": "北京", "date": "明天"},
                     "小雨，18度")],
                   "北京明天小雨，18度，建议带伞。"),
        _agent_row("t2", "q-zh", "test", "tpl-seen", "zh", "北京明天天气怎么样？要带伞吗？",
                   [("先搜索北京明天的天气", "web_search", {"query": "北京 明天 天气"},
                     "北京明天有雨"),
                    ("再确认一下天气", "get_weather", {"city": "北京"}, "小雨")],
                   "明天北京有小雨，要带伞。"),
        _agent_row("t3", "q-en", "test", "bench-autogpt", "en", "What is the weather in Paris?",
                   [("check the weather", "get_weather", {"city": "Pari"}, error),
                    ("the city name was wrong, retry", "get_weather", {"city": "Paris"},
                     "sunny, 24C")],
                   "It is sunny in Paris, 24C."),
        _agent_row("t4", "q-none", "test", "bench-react", "en", "Say hello to me.", [],
                   "Hello!"),
        _general_row("g1", "test", "en", "Name a prime number.", "7 is a prime number."),
        _general_row("g2", "test", "zh", "一年有几个月？", "一年有十二个月。"),
        _general_row("g3", "train", "en", "Count to three.", "1, 2, 3."),
    ]


def template_rows() -> list[dict[str, Any]]:
    """The templates artifact: a seen and an unseen Meta-Agent planner, an unseen dropped one."""
    sections = {
        "profile": "You are a travel helper.",
        "instruction": "Use one tool per step; finish when you know enough.",
        "tools": "Tools:\n{tools}",
        "goal": "Now: {current_time}\nRequest: {goal}",
        "memory": "Done so far:\n{completed_tasks}\n{conversation_history}\n{knowledge}",
        "format": "{output_format}",
    }
    text = compose_template(sections)
    row = {"source": "meta-agent", "kind": "planner", "lang": "en", "text": text,
           "sections": sections, "kept": True}
    return [{"id": "tpl-seen", "protocol": "kuaiagent", **row},
            {"id": "tpl-unseen", "protocol": "toolllama", **row},
            {"id": "tpl-dropped", "protocol": "react", **row, "kept": False}]


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
    assert step1.memory_last_task == ("web_search", {"query": "北京 明天 天气"})
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
