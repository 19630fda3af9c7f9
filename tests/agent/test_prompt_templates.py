"""The template model: every benchmark template renders with Chinese and English inputs, loading
names what is missing, composed Meta-Agent templates are inert text around their variables."""

from __future__ import annotations

from datetime import datetime

import pytest

from agentune.tasks.agent.formats import ToolCallStep, agent_format
from agentune.tasks.agent.prompt_templates import (
    BENCHMARKS,
    SECTIONS,
    AgentPromptInputs,
    PastTask,
    TemplateError,
    Turn,
    benchmark_template,
    compose_template,
    concluder_for,
    load_template,
    section_placeholder_problems,
    section_sources,
)

NOW = datetime(2025, 6, 2, 9, 30)
TOOLS = [
    {"name": "get_weather", "description": "Weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "web_search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
]
INPUTS = {
    "zh": {"goal": "北京明天会下雨吗？", "knowledge": ["北京位于华北。"],
           "conversation_history": [Turn(role="user", content="你好"),
                                    Turn(role="assistant", content="你好，有什么可以帮你？")],
           "completed_tasks": [PastTask(thought="查询北京天气", tool_name="get_weather",
                                        tool_args={"city": "北京"}, observation="小雨，18°C")]},
    "en": {"goal": "Will it rain in Berlin tomorrow?", "knowledge": ["Berlin is in Germany."],
           "conversation_history": [Turn(role="user", content="hi")],
           "completed_tasks": [PastTask(thought="check Berlin weather", tool_name="get_weather",
                                        tool_args={"city": "Berlin"}, observation="light rain")]},
}


def inputs(lang: str, full: bool = True) -> AgentPromptInputs:
    data = dict(INPUTS[lang])
    if not full:
        data = {"goal": data["goal"]}
    return AgentPromptInputs.for_query(data.pop("goal"), TOOLS, current_time=NOW, lang=lang, **data)


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_templates_render_every_input(name: str, lang: str) -> None:
    template = benchmark_template(name)
    text = template.render(inputs(lang))
    data = INPUTS[lang]
    assert data["goal"] in text
    assert "2025-06-02 09:30" in text
    assert data["knowledge"][0] in text
    assert data["conversation_history"][0].content in text
    assert data["completed_tasks"][0].observation in text
    if template.kind == "planner":
        assert "get_weather" in text and "web_search" in text
    assert "{{" not in text and "{%" not in text
    sections = template.render_sections(inputs(lang))
    assert list(sections) == list(template.sections)
    assert all(sections[s] for s in ("profile", "instruction", "goal"))


def test_empty_memory_renders_cleanly_and_bilingual_templates_follow_the_query() -> None:
    zh = benchmark_template("kuaiagent").render(inputs("zh", full=False))
    en = benchmark_template("kuaiagent").render(inputs("en", full=False))
    assert "已完成任务：\n无" in zh and "当前时间：2025-06-02 09:30 星期一" in zh
    assert "Completed tasks:\nnone" in en and "(Monday)" in en
    assert "\n\n\n" not in zh
    react = benchmark_template("react").render(inputs("en", full=False))
    assert react.endswith("Question: Will it rain in Berlin tomorrow?")
    concluder = concluder_for("kuaiagent")
    assert concluder is not None and concluder.kind == "concluder"
    assert concluder_for("react") is None


def test_benchmark_protocols_match_their_formats() -> None:
    for name, spec in BENCHMARKS.items():
        template = benchmark_template(name)
        assert template.protocol == spec.protocol
        agent_format(template.protocol)
    autogpt = benchmark_template("autogpt").render_sections(inputs("en"))["format"]
    assert '"thoughts"' in autogpt and '"command"' in autogpt


GOOD = {
    "profile": "You are Orbit, a travel planner.",
    "instruction": "1. Be brief.\n2. Never guess prices.",
    "tools": "Tools:\n{tools}",
    "goal": "Request: {goal}",
    "memory": "Done:\n{completed_tasks}\nChat:\n{conversation_history}\nFacts:\n{knowledge}\n"
              "Now: {current_time}",
    "format": "Reply like this:\n{output_format}",
}


def blocks(**overrides: str) -> str:
    parts = {name: f"{{% block {name} %}}{overrides.get(name, GOOD[name])}{{% endblock %}}"
             for name in SECTIONS}
    return "\n".join(parts.values())


@pytest.mark.parametrize("text, message", [
    (blocks().replace("{% block goal %}Request: {goal}{% endblock %}", "Request: {{ goal }}"),
     "missing_section: goal"),
    (blocks(goal="Request: {{ goal }}", tools="{{ tools | tool_lines }}",
            memory="{{ completed_tasks | task_history }} {{ current_time }}"),
     "missing_variable: conversation_history (in section memory)"),
    (blocks(goal="Request: {{ goal }}", tools="{{ tools | tool_lines }}",
            memory="{{ completed_tasks }}{{ conversation_history }}{{ knowledge }}"),
     "missing_variable: current_time"),
    (blocks(goal="{{ goal }} {{ user_name }}", tools="{{ tools }}",
            memory="{{ completed_tasks }}{{ conversation_history }}{{ knowledge }}{{ current_time }}"),
     "unknown_variable: user_name"),
    (blocks(profile="   ", goal="{{ goal }}", tools="{{ tools }}",
            memory="{{ completed_tasks }}{{ conversation_history }}{{ knowledge }}{{ current_time }}"),
     "empty_section: profile"),
    ("{% block profile %}unclosed", "syntax"),
])
def test_loading_names_what_is_missing(text: str, message: str) -> None:
    with pytest.raises(TemplateError) as info:
        load_template(text, id="t1", protocol="react", origin="templates/x.j2")
    assert "templates/x.j2" in str(info.value) and message in str(info.value)


def test_unknown_protocol_is_an_error() -> None:
    with pytest.raises(TemplateError, match="unknown agent output format 'xml'"):
        load_template(compose_template(GOOD), id="t1", protocol="xml")


def test_composed_template_renders_with_the_protocols_canonical_format() -> None:
    assert section_placeholder_problems(GOOD) == []
    template = load_template(compose_template(GOOD), id="t1", protocol="kuaiagent", lang="en")
    text = template.render(inputs("zh"))
    assert text.startswith("You are Orbit, a travel planner.")
    assert "Request: 北京明天会下雨吗？" in text
    assert '"task_name": "task description"' in text  # KuaiAgent's format, in English
    assert "Task 1: 查询北京天气" in text  # memory in the KuaiAgent format's own way
    assert set(section_sources(template.text)) == set(SECTIONS)


def test_composed_text_cannot_inject_jinja() -> None:
    hostile = dict(GOOD, profile="{{ ''.__class__.__mro__ }} {% for x in range(3) %}x{% endfor %}"
                                 " {# hidden #} {unknown} {\"json\": 1}")
    template = load_template(compose_template(hostile), id="t1", protocol="react")
    text = template.render(inputs("en"))
    assert "{{ ''.__class__.__mro__ }} {% for x in range(3) %}x{% endfor %} {# hidden #}" in text
    assert '{unknown} {"json": 1}' in text


def test_placeholder_problems() -> None:
    bad = dict(GOOD, goal="The request.", tools="Tools: {tools} for {user}",
               memory="{completed_tasks} {conversation_history} {knowledge}")
    assert section_placeholder_problems(bad) == [
        ("unknown_variable", "user (in section tools)"),
        ("missing_variable", "goal (in section goal)"),
        ("missing_variable", "current_time"),
    ]


@pytest.mark.parametrize("name", ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"])
def test_benchmark_planners_render_in_both_languages_and_read_back(name: str) -> None:
    template = benchmark_template(name)
    assert template.lang is None  # bilingual: the request's language picks the text
    tools = [{"name": "get_weather", "description": "Weather. 天气。",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    now = datetime.fromisoformat("2025-06-02T09:30:00+00:00")
    rendered = {lang: template.render(AgentPromptInputs.for_query(
        "奥斯陆天气如何？" if lang == "zh" else "Weather in Oslo?", tools, current_time=now,
        lang=lang)) for lang in ("zh", "en")}
    han = sum("\u4e00" <= ch <= "\u9fff" for ch in rendered["zh"].replace("奥斯陆天气如何", ""))
    assert han > 20 and sum("\u4e00" <= ch <= "\u9fff" for ch in rendered["en"]) <= 2
    fmt = agent_format(template.protocol)
    step = ToolCallStep("查一下", "get_weather", {"city": "奥斯陆"})
    assert fmt.parse(fmt.render(step), tools).calls == [("get_weather", {"city": "奥斯陆"})]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_default_time_with_its_offset_renders_the_prompts_of_the_naive_one(lang: str) -> None:
    # templates/evaluate.current_time gained a UTC offset (so the Prefect form accepts it):
    # prompts show the wall-clock time, so every request, and its response-cache key, is unchanged.
    from agentune.config.build_templates import BuildTemplatesConfig
    from agentune.config.evaluate import EvaluateConfig

    old = datetime(2025, 6, 2, 9, 30)
    tools = [{"name": "get_weather", "description": "Weather of a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    for new in (BuildTemplatesConfig().current_time, EvaluateConfig().current_time):
        assert new.utcoffset() is not None and new.replace(tzinfo=None) == old
        for name in BENCHMARKS:
            template = benchmark_template(name)
            assert template.render(AgentPromptInputs.for_query("天气?", tools, current_time=new,
                                                               lang=lang)) == \
                template.render(AgentPromptInputs.for_query("天气?", tools, current_time=old,
                                                             lang=lang))
