"""Reading planning answers as KAgentBench's official script does (quirks included), and as the
project's tolerant parsers do."""

from __future__ import annotations

import json

import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.parsing import (
    PlanReading,
    conclusion_text,
    official_json,
    read_plan,
)

FUNCS = [{"name": "web_search", "parameters": {"properties": {"query": {}, "top_k": {}}}},
         {"name": "calc", "parameters": {"properties": {}}}]


def test_react_reads_thought_tool_and_first_parameter() -> None:
    text = "Thought: 先搜索\nAction: web_search\nAction Input: 北京天气\nObservation: 雨"
    assert read_plan("react", text, FUNCS) == PlanReading(
        "Thought: 先搜索", "web_search", {"query": "北京天气"})


def test_react_official_quirks() -> None:
    # No thought: the text up to "Action Input" is the thought.
    reading = read_plan("react", "Action: web_search\nAction Input: x", FUNCS)
    assert reading.thought == "Action: web_search"
    # An empty thought stays "" (the script's `thought == 'None'` is a comparison).
    assert read_plan("react", " Action: web_search\nAction Input: x", FUNCS).thought == ""
    # A tool without parameters gets no arguments; an empty input is kept as "".
    assert read_plan("react", "Action: calc\nAction Input: 1+1", FUNCS).tool_args == {}
    assert read_plan("react", "Action: web_search\nAction Input: \n", FUNCS).tool_args == {
        "query": ""}
    # The agentune parser reads these as no thought / no arguments.
    assert read_plan("react", "Action: web_search\nAction Input: x", FUNCS,
                     parser="agentune").thought == "None"


def test_autogpt_pretty_json_is_found_anywhere_compact_json_only_alone() -> None:
    data = {"thoughts": {"text": "搜索一下"}, "command": {"name": "web_search",
                                                        "args": {"query": "q"}}}
    pretty = json.dumps(data, ensure_ascii=False, indent=2)
    compact = json.dumps(data, ensure_ascii=False)
    expected = PlanReading("搜索一下", "web_search", {"query": "q"})
    assert read_plan("autogpt", f"Sure!\n```json\n{pretty}\n```", FUNCS) == expected
    assert read_plan("autogpt", compact, FUNCS) == expected
    assert read_plan("autogpt", f"Sure! {compact}", FUNCS) == PlanReading()
    assert read_plan("autogpt", f"Sure! {compact}", FUNCS, parser="agentune") == expected


def test_official_json_repairs() -> None:
    # Missing closing braces are appended.
    assert official_json('{"a": {"b": 1}') == {"a": {"b": 1}}
    # Bare keys are quoted (a regular expression over the whole text).
    assert official_json('{a: 1, "b": 2}') == {"a": 1, "b": 2}
    # ... which breaks values holding "word:" (a URL): the answer is then unreadable.
    assert official_json('{a: "http://x"}') is None
    # An invalid escape loses its backslash.
    assert official_json('{"a": "x\\qy"}') == {"a": "xqy"}
    assert official_json("no json") is None
    assert official_json('["a list"]') is None


def test_toolllama_without_thought_reads_as_the_text_of_an_empty_list() -> None:
    assert read_plan("toolllama", 'Action: web_search\nAction Input: {"query": "q"}', FUNCS) == \
        PlanReading("[]", "web_search", {"query": "q"})
    assert read_plan("toolllama", "Thought: t\nAction: Finish\nAction Input: not json",
                     FUNCS) == PlanReading("t", "Finish", {})


def test_modelscope_never_has_a_thought_and_needs_its_end_tag() -> None:
    call = json.dumps({"api_name": "web_search", "parameters": {"query": "q"}}, indent=2)
    text = f"I will search.\n<|startofthink|>```JSON\n{call}\n```<|endofthink|>"
    assert read_plan("modelscope", text, FUNCS) == PlanReading("None", "web_search",
                                                              {"query": "q"})
    # Compact JSON inside the fence is not found by the official locator (no "}\n}").
    compact = json.dumps({"api_name": "web_search", "parameters": {"query": "q"}})
    fenced = f"<|startofthink|>```JSON\n{compact}\n```<|endofthink|>"
    assert read_plan("modelscope", fenced, FUNCS) == PlanReading()
    assert read_plan("modelscope", fenced, FUNCS, parser="agentune").tool_name == "web_search"
    assert read_plan("modelscope", text.replace("<|endofthink|>", ""), FUNCS) == PlanReading()


def test_kuaiagent_reads_task_name_and_command() -> None:
    text = json.dumps({"task_name": "查天气", "command": {"name": "web_search",
                                                       "args": {"query": "天气"}}}, indent=4)
    assert read_plan("kuaiagent", text, FUNCS) == PlanReading("查天气", "web_search",
                                                             {"query": "天气"})
    # Non-object arguments are dropped; an empty tool name is "None".
    bad = json.dumps({"task_name": "t", "command": {"name": "", "args": "x"}})
    assert read_plan("kuaiagent", bad, FUNCS) == PlanReading("t", "None", {})


def test_unknown_protocol_is_an_error() -> None:
    with pytest.raises(KeyError):
        read_plan("nope", "text", FUNCS)


@pytest.mark.parametrize(("protocol", "answer", "scored"), [
    ("autogpt", 'finish(response="北京明天下雨。")', "北京明天下雨。"),
    ("autogpt", 'I need web_search(query="x") first', ""),
    ("autogpt", 'a response="one" and response="two")', 'one" and '),
    ("autogpt", "plain answer", "plain answer"),
    ("toolllama", 'Action: Finish\nAction Input: {"return_type": "give_answer", '
                  '"final_answer": "It is {sunny}"}', "It is {sunny"),
    ("toolllama", "\n", ""),
    ("react", "Final Answer: yes", "Final Answer: yes"),
    (None, "anything", "anything"),
])
def test_concluding_post_processing(protocol, answer, scored) -> None:
    assert conclusion_text(protocol, answer) == scored


def test_agentune_parser_scores_the_final_answer_itself() -> None:
    text = json.dumps({"thoughts": {"text": "done"},
                       "command": {"name": "finish", "args": {"response": "答案"}}})
    assert conclusion_text("autogpt", text) == text
    assert conclusion_text("autogpt", text, "agentune") == "答案"
    assert conclusion_text("react", "Thought: ok\nFinal Answer: yes", "agentune") == "yes"
