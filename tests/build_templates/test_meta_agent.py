"""The Meta-Agent's briefs and request, reading its answers, and the structural filter's reasons."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentune.tasks.agent.prompt_templates import (
    BENCHMARKS,
    SECTIONS,
    benchmark_template,
    section_placeholder_problems,
)
from agentune.tasks.build_templates.meta_agent import (
    CandidateBrief,
    CandidateDraft,
    MetaAgentError,
    QuerySetView,
    StructuralFilter,
    meta_request,
    plan_candidates,
    probe_inputs,
    read_meta_answer,
    set_views,
)
from agentune.tasks.common.rejects import KEEP
from agentune.tasks.llm.types import ChatResult, Usage

PROTOCOLS = ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"]
VIEWS = [
    QuerySetView("weather-zh-000", "zh", "weather", ("北京明天下雨吗？", "上海气温多少？"),
                 (("get_weather", "Weather for a city."),)),
    QuerySetView("travel-en-000", "en", "travel", ("Book a train to Lyon.",),
                 (("search_trains", "Find trains."), ("web_search", "Search the web."))),
]


def brief(index: int = 0, protocol: str = "react", lang: str = "en") -> CandidateBrief:
    return CandidateBrief(f"tpl-s-{index:02d}", "s", index, lang, protocol, "warm and friendly", 4,
                          "accuracy", "weather", ("Will it rain?",), (("get_weather", "w"),))


def test_briefs_vary_protocol_language_and_style() -> None:
    briefs = plan_candidates(VIEWS, per_set=5, protocols=PROTOCOLS, languages=["zh", "en"], seed=0)
    assert [b.candidate_id for b in briefs[:2]] == ["tpl-weather-zh-000-00", "tpl-weather-zh-000-01"]
    assert Counter(b.protocol for b in briefs) == {p: 2 for p in PROTOCOLS}
    assert [b.lang for b in briefs if b.set_id == "weather-zh-000"] == ["zh", "en", "zh", "en", "zh"]
    assert next(b.lang for b in briefs if b.set_id == "travel-en-000") == "en"
    assert len({(b.tone, b.n_rules, b.emphasis) for b in briefs}) >= 8
    assert all(3 <= b.n_rules <= 9 for b in briefs)
    again = plan_candidates(VIEWS, per_set=5, protocols=PROTOCOLS, languages=["zh", "en"], seed=0)
    assert again == briefs
    other = plan_candidates(VIEWS, per_set=5, protocols=PROTOCOLS, languages=["zh", "en"], seed=1)
    assert other != briefs
    with pytest.raises(KeyError, match="xml"):
        plan_candidates(VIEWS, per_set=1, protocols=["xml"], languages=["en"])


def test_meta_request_asks_for_every_section_with_a_bounded_schema() -> None:
    b = plan_candidates(VIEWS, per_set=1, protocols=["kuaiagent"], languages=["zh"])[0]
    request = meta_request(b, protocols=PROTOCOLS, max_chars=300, temperature=1.0, seed=7)
    user = request.messages[1]["content"]
    for text in ("北京明天下雨吗？", "get_weather", "Simplified Chinese", b.tone, '"kuaiagent"',
                 "{tools}", "{goal}", "{completed_tasks}", "{conversation_history}", "{knowledge}",
                 "{current_time}", "{output_format}", f"{b.n_rules} numbered rules"):
        assert text in user, text
    schema = request.response_format["json_schema"]["schema"]  # type: ignore[index]
    assert schema["required"] == ["name", "protocol", "profile", "tools", "goal", "memory",
                                  "current_time", "format", "instruction"]
    assert schema["properties"]["protocol"]["enum"] == PROTOCOLS
    assert schema["properties"]["instruction"]["maxLength"] == 600
    assert schema["properties"]["goal"]["maxLength"] == 300
    memory = schema["properties"]["memory"]
    assert memory["required"] == ["completed_tasks", "conversation_history", "knowledge"]
    assert memory["properties"]["knowledge"]["maxLength"] == 150
    assert request.max_tokens is not None and request.max_tokens >= 3 * 300 * len(SECTIONS)
    assert (request.temperature, request.seed) == (1.0, 7)


GOOD = {
    "name": "Orbit",
    "protocol": "react",
    "profile": "You are Orbit, a travel planner who books trains and hotels for busy people.",
    "instruction": "1. Confirm dates before booking.\n2. Prefer direct trains.\n3. Quote prices.",
    "tools": "Booking tools at your disposal:\n{tools}",
    "goal": "Traveller's request: {goal}",
    "memory": "Bookings made so far:\n{completed_tasks}\nWhat the traveller said:\n"
              "{conversation_history}\nTravel notes:\n{knowledge}\nLocal time: {current_time}",
    "format": "Write every reply exactly in this shape:\n{output_format}",
}


def result(content: str | None, finish: str = "stop") -> ChatResult:
    return ChatResult(content=content, finish_reason=finish, usage=Usage(completion_tokens=9))


def test_reading_meta_answers() -> None:
    structured = {**GOOD, "memory": {"knowledge": "Notes: {knowledge}",
                                     "completed_tasks": "Done: {completed_tasks}",
                                     "conversation_history": "Chat: {conversation_history}"},
                  "current_time": "Now: {current_time}"}
    draft = read_meta_answer(brief(), result(json.dumps(structured)))
    assert (draft.name, draft.protocol) == ("Orbit", "react")
    assert draft.sections["memory"] == ("Done: {completed_tasks}\nChat: {conversation_history}\n"
                                        "Notes: {knowledge}\nNow: {current_time}")
    assert {s: draft.sections[s] for s in SECTIONS if s != "memory"} == {
        s: GOOD[s] for s in SECTIONS if s != "memory"}
    # A teacher that writes Memory as one text (no schema enforcement) is read as it is.
    draft = read_meta_answer(brief(), result(json.dumps(GOOD)))
    assert draft.sections == {s: GOOD[s] for s in SECTIONS}
    gap = read_meta_answer(brief(), result(json.dumps(
        {**structured, "memory": {"completed_tasks": "Done: {completed_tasks}"}})))
    assert [p for _, p in section_placeholder_problems(gap.sections)] == [
        "conversation_history (in section memory)", "knowledge (in section memory)"]
    partial = read_meta_answer(brief(), result('```json\n{"name": "x", "profile": 3, "goal": "g"'))
    assert partial.sections == {"goal": "g"} and partial.protocol is None
    for content, finish, reason in [("I cannot do that.", "stop", "not_json"),
                                    ('{"name": "x", "profile": "You are', "length", "truncated")]:
        with pytest.raises(MetaAgentError) as info:
            read_meta_answer(brief(), result(content, finish))
        assert info.value.reason == reason


def draft(index: int = 0, **changes: object) -> CandidateDraft:
    data = {**GOOD, **changes}
    sections = {s: data[s] for s in SECTIONS if isinstance(data.get(s), str)}
    protocol = data.get("protocol")
    return CandidateDraft(brief(index, str(protocol)), str(data["name"]),
                          protocol if isinstance(protocol, str) else None, sections)


def copy_of_benchmark() -> dict[str, str]:
    """AutoGPT's own wording, poured into the six sections."""
    sections = benchmark_template("autogpt").render_sections(probe_inputs("en"))
    return {
        "profile": sections["profile"],
        "instruction": sections["instruction"],
        "tools": "Commands:\n{tools}",
        "goal": "GOAL: {goal}",
        "memory": "Completed tasks:\n{completed_tasks}\nConversation history:\n"
                  "{conversation_history}\nKnowledge:\n{knowledge}\nCurrent time: {current_time}",
        "format": "Reply with JSON only, in exactly this shape:\n{output_format}",
    }


@pytest.mark.parametrize("candidate, reason, detail", [
    (draft(memory=""), "missing_section", "memory"),
    (draft(profile=None, format="  "), "missing_section", "profile, format"),
    (draft(protocol="xml"), "format_unparseable", "'xml'"),
    (draft(protocol=None), "format_unparseable", "None"),
    (draft(goal="The traveller's request."), "missing_variable", "goal (in section goal)"),
    (draft(format="Answer in JSON."), "missing_variable", "output_format (in section format)"),
    (draft(tools="Tools: {tools} for {user_name}"), "unknown_variable", "user_name"),
    (draft(**copy_of_benchmark(), protocol="autogpt"), "near_duplicate", "bench-autogpt"),
])
def test_structural_filter_reasons(candidate: CandidateDraft, reason: str, detail: str) -> None:
    outcome = StructuralFilter([benchmark_template(n) for n in BENCHMARKS]).check(candidate)
    assert outcome.verdict == (False, reason)
    assert detail in outcome.detail
    assert outcome.template is None


def test_structural_filter_keeps_good_ones_and_drops_near_copies_of_kept_ones() -> None:
    check = StructuralFilter([benchmark_template(n) for n in BENCHMARKS])
    first = check.check(draft(0))
    assert first.verdict is KEEP and first.template is not None
    assert first.template.id == "tpl-s-00" and first.template.protocol == "react"
    copy = check.check(draft(1, profile=GOOD["profile"] + " Always polite."))
    assert copy.verdict == (False, "near_duplicate") and "tpl-s-00" in copy.detail
    different = check.check(draft(
        2, protocol="toolllama",
        profile="你是一名谨慎的天气顾问，帮助用户安排出行。",
        instruction="1. 先确认城市。\n2. 不要编造数据。\n3. 回答简洁。",
        tools="可用工具：\n{tools}", goal="用户的问题：{goal}",
        memory="已做的步骤：\n{completed_tasks}\n对话：\n{conversation_history}\n资料：\n{knowledge}\n"
               "现在时间：{current_time}",
        format="请严格按以下格式回答：\n{output_format}"))
    assert different.verdict is KEEP
    # Only the protocols the run allows are parseable formats for it.
    narrow = StructuralFilter(allowed_protocols=["kuaiagent"])
    assert narrow.check(draft(3)).verdict == (False, "format_unparseable")


def test_set_views_group_queries_and_their_tools() -> None:
    rows = [
        {"id": "q1", "text": "a", "lang": "en", "set_id": "s1", "scenario": "x", "tool_ids": ["t1"]},
        {"id": "q2", "text": "b", "lang": "en", "set_id": "s2", "scenario": None, "tool_ids": []},
        {"id": "q3", "text": "c", "lang": "en", "set_id": "s1", "scenario": "x",
         "tool_ids": ["t2", "t1"]},
    ]
    tools = {"t1": {"description": "one"}, "t2": {"description": "two"}}
    views = set_views(rows, tools)
    assert [v.set_id for v in views] == ["s1", "s2"]
    assert views[0].examples == ("a", "c") and views[0].tools == (("t1", "one"), ("t2", "two"))
    assert views[1].scenario == "general" and views[1].tools == ()
