"""Every agent format's parser on well-formed and faulty answers (table-driven), the KAgentBench
extraction rules, rendering round trips, and the JSON repair underneath."""

from __future__ import annotations

from typing import Any

import pytest

from agentune.tasks.agent.formats import (
    FORMATS,
    KAGENTBENCH_KEYS,
    NONE,
    CompletedTask,
    FinalAnswerStep,
    GiveUpStep,
    ToolCallStep,
    agent_format,
    parse_answer,
    render_step,
)
from agentune.tasks.agent.json_reading import read_json_object

# KAgentBench `funcs` entries (OpenAI tool entries work the same, see test below).
FUNCS = [
    {"name": "get_weather", "description": "Weather for a city and day.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "day": {"type": "string"}}}},
    {"name": "web_search", "description": "Search the web.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "now", "description": "The time.", "parameters": {"type": "object", "properties": {}}},
]


def case(protocol: str, text: str, thought: str = NONE, tool: str = NONE,
         args: dict[str, Any] | None = None, final: str | None = None, gave_up: bool = False,
         repairs: set[str] | None = None, id: str = "") -> Any:
    return pytest.param(protocol, text, thought, tool, args or {}, final, gave_up, repairs or set(),
                        id=f"{protocol}-{id}")


PARSE_CASES = [
    # ReAct: raw thought before the first Action/Final Answer; args under the first parameter.
    case("react", "Thought: I need the weather.\nAction: get_weather\nAction Input: Beijing\n"
         "Observation: sunny", "Thought: I need the weather.", "get_weather",
         {"city": "Beijing"}, id="call"),
    case("react", "Thought: I now know the final answer\nFinal Answer: It is sunny, 22°C.",
         "Thought: I now know the final answer", final="It is sunny, 22°C.", id="final"),
    case("react", "思考：需要查天气\nAction: get_weather\nAction Input: 北京", "思考：需要查天气",
         "get_weather", {"city": "北京"}, id="zh"),
    case("react", "```\nThought: search it\nAction: web_search\nAction Input: MAT paper\n```",
         "Thought: search it", "web_search", {"query": "MAT paper"}, repairs={"code_fence"},
         id="code-fence"),
    case("react", "Thought: x\nAction: get_weather\nAction Input: Paris\nObservation: 20C\n"
         "Thought: done\nFinal Answer: 20C", "Thought: x", "get_weather", {"city": "Paris"},
         id="trailing-turns"),
    case("react", "Thought: fly\nAction: book_flight\nAction Input: PEK-SHA", "Thought: fly",
         "book_flight", id="unknown-tool-no-args"),
    case("react", "Thought: t\nAction: now\nAction Input: please", "Thought: t", "now",
         id="tool-without-parameters"),
    case("react", "Action: web_search\nAction Input: x", NONE, "web_search", {"query": "x"},
         id="no-thought"),
    case("react", "I am not sure what to do.", "I am not sure what to do.", id="prose-only"),
    case("react", "", id="empty"),
    # AutoGPT: JSON, thoughts.text / command.name / command.args.
    case("autogpt", '{"thoughts": {"text": "look it up", "reasoning": "r"}, "command": '
         '{"name": "web_search", "args": {"query": "KwaiAgents"}}}', "look it up", "web_search",
         {"query": "KwaiAgents"}, id="call"),
    case("autogpt", '{"thoughts": {"text": "done"}, "command": {"name": "finish", "args": '
         '{"response": "The answer is 42."}}}', "done", "finish",
         {"response": "The answer is 42."}, final="The answer is 42.", id="finish"),
    case("autogpt", 'Sure! Here is my reply:\n```json\n{"thoughts": {"text": "t"}, "command": '
         '{"name": "web_search", "args": {"query": "q"}}}\n```\nLet me know.', "t", "web_search",
         {"query": "q"}, repairs={"code_fence"}, id="fence-and-prose"),
    case("autogpt", '{"thoughts": {"text": "t"}, "command": {"name": "web_search", "args": '
         '{"query": "q"', "t", "web_search", {"query": "q"}, repairs={"unbalanced_braces"},
         id="unbalanced"),
    case("autogpt", '{thoughts: {text: "t"}, command: {name: "web_search", args: {query: "a: b"}}}',
         "t", "web_search", {"query": "a: b"}, repairs={"bare_key"}, id="bare-keys"),
    case("autogpt", '{"thoughts": {"text": "open C:\\data"}, "command": {"name": "now", "args": {}}}',
         "open C:data", "now", repairs={"bad_escape"}, id="bad-escape"),
    case("autogpt", '{"thoughts": {"text": "t"}, "command": {"name": "web_search", "args": "q"}}',
         "t", "web_search", id="args-not-a-dict"),
    case("autogpt", '{"thoughts": {"text": ""}, "command": {"name": ""}}', id="empty-fields"),
    case("autogpt", "I would search the web.", id="no-json"),
    # ToolLLaMA: Thought / Action / Action Input (JSON); Finish answers or gives up.
    case("toolllama", 'Thought: find it\nAction: web_search\nAction Input: {"query": "MAT"}',
         "find it", "web_search", {"query": "MAT"}, id="call"),
    case("toolllama", 'Thought: I know\nAction: Finish\nAction Input: {"return_type": '
         '"give_answer", "final_answer": "Sunny."}', "I know", "Finish",
         {"return_type": "give_answer", "final_answer": "Sunny."}, final="Sunny.", id="finish"),
    case("toolllama", 'Thought: stuck\nAction: Finish\nAction Input: {"return_type": '
         '"give_up_and_restart"}', "stuck", "Finish", {"return_type": "give_up_and_restart"},
         gave_up=True, id="give-up"),
    case("toolllama", 'Thought: t\nAction: get_weather\nAction Input: {"city": "Paris", "day": '
         '"today"\nObservation: ok', "t", "get_weather", {"city": "Paris", "day": "today"},
         repairs={"unbalanced_braces"}, id="unbalanced-then-trailing"),
    case("toolllama", "Thought: t\nAction: web_search\nAction Input: {query: 'x'}", "t",
         "web_search", id="args-unreadable"),
    case("toolllama", 'Action: web_search\nAction Input: {query: "x"}', NONE, "web_search",
         {"query": "x"}, repairs={"bare_key"}, id="no-thought-bare-key"),
    case("toolllama", "Thought: only thinking", "only thinking", id="thought-only"),
    # ModelScope: JSON between the think markers; the thought is never read.
    case("modelscope", 'Let me check.\n<|startofthink|>```JSON\n{"api_name": "get_weather", '
         '"parameters": {"city": "Rome"}}\n```<|endofthink|>', NONE, "get_weather",
         {"city": "Rome"}, id="call"),
    case("modelscope", '<|startofthink|>{"api_name": "now", "parameters": {}}<|endofthink|>',
         NONE, "now", id="no-fence"),
    case("modelscope", '<|startofthink|>```JSON\n{"api_name": "web_search", "parameters": '
         '{"query": "x"', NONE, "web_search", {"query": "x"},
         repairs={"missing_endofthink", "unbalanced_braces"}, id="cut-off"),
    case("modelscope", '<|startofthink|>{api_name: "now", parameters: {}}<|endofthink|> ok',
         NONE, "now", repairs={"bare_key"}, id="bare-keys-trailing-text"),
    case("modelscope", "It is 9:30 now.", final="It is 9:30 now.", id="answer"),
    # KuaiAgent planner: task_name / command.name / command.args.
    case("kuaiagent", '{"task_name": "查询北京天气", "command": {"name": "get_weather", "args": '
         '{"city": "北京"}}}', "查询北京天气", "get_weather", {"city": "北京"}, id="call"),
    case("kuaiagent", '{"task_name": "信息已足够", "command": {"name": "task_complete", "args": {}}}',
         "信息已足够", "task_complete", id="task-complete"),
    case("kuaiagent", '```json\n{"task_name": "t", "command": {"name": "now", "args": {}}}\n```',
         "t", "now", repairs={"code_fence"}, id="code-fence"),
    case("kuaiagent", '{\n "task_name": "t",\n "command": {\n  "name": "web_search",\n  "args": '
         '{\n   "query": "q",\n  }\n', "t", "web_search", {"query": "q"},
         repairs={"unbalanced_braces", "trailing_comma"}, id="unbalanced-trailing-comma"),
    case("kuaiagent", 'A new Task:\n{"task_name": "t", "command": {"name": "now", "args": []}} '
         "That's all.", "t", "now", repairs={"surrounding_text"}, id="prose-around-list-args"),
    case("kuaiagent", "{task_name: 't'}", id="unreadable"),
]


@pytest.mark.parametrize(
    "protocol, text, thought, tool, args, final, gave_up, repairs", PARSE_CASES
)
def test_parser(protocol: str, text: str, thought: str, tool: str, args: dict[str, Any],
                final: str | None, gave_up: bool, repairs: set[str]) -> None:
    step = parse_answer(protocol, text, FUNCS)
    assert step.kagentbench() == (thought, tool, args)
    assert step.final_answer == final
    assert step.gave_up is gave_up
    assert repairs <= set(step.repairs), step.repairs


def test_every_format_is_covered_by_the_parser_table() -> None:
    covered = {p.values[0] for p in PARSE_CASES}
    assert covered == set(FORMATS)


def test_kagentbench_keys_and_openai_tool_entries() -> None:
    assert KAGENTBENCH_KEYS == {"ReACT": "react", "AutoGPT": "autogpt", "ToolLlama": "toolllama",
                                "ModelScope": "modelscope", "KuaiAgent": "kuaiagent"}
    openai_tools = [{"type": "function", "function": f} for f in FUNCS]
    text = "Thought: t\nAction: get_weather\nAction Input: Oslo"
    assert agent_format("ReACT").parse(text, openai_tools).kagentbench() == (
        "Thought: t", "get_weather", {"city": "Oslo"})
    with pytest.raises(KeyError, match="Kuaiagent"):
        agent_format("Kuaiagent")


@pytest.mark.parametrize("key, text, expected", [
    ("AutoGPT", 'finish(response="It is sunny in Beijing.")', "It is sunny in Beijing."),
    ("AutoGPT", 'web_search(query="weather") then finish(response="x")', ""),
    ("AutoGPT", "A plain answer.", "A plain answer."),
    ("ToolLlama", ('Action: Finish\nAction Input: {"return_type": "give_answer", '
                   '"final_answer": "Sunny, 22 C"}'), "Sunny, 22 C"),
    ("ToolLlama", "\n", ""),
    ("ReACT", "Final Answer: ok", "Final Answer: ok"),
    ("KuaiAgent", "北京今天晴。", "北京今天晴。"),
    ("ModelScope", "", ""),
])
def test_kagentbench_conclusion_text(key: str, text: str, expected: str) -> None:
    assert agent_format(key).conclusion(text) == expected


CALL = ToolCallStep("check the weather", "get_weather", {"city": "北京"})


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_rendered_steps_parse_back(protocol: str) -> None:
    fmt = agent_format(protocol)
    step = fmt.parse(render_step(protocol, CALL), FUNCS)
    assert (step.tool_name, step.tool_args) == ("get_weather", {"city": "北京"})
    assert step.repairs == ()
    if protocol not in ("react", "modelscope"):
        assert step.thought == "check the weather"
    answer = render_step(protocol, FinalAnswerStep("明天有雨。", "I know it"))
    if fmt.two_stage:
        assert answer == "明天有雨。"
        assert fmt.parse_conclusion(answer).final_answer == "明天有雨。"  # type: ignore[attr-defined]
        finish = fmt.parse(render_step(protocol, fmt.finish("enough")))  # type: ignore[attr-defined]
        assert finish.tool_name == fmt.finish_tool == "task_complete"
        assert fmt.step_limit == 5
    else:
        assert fmt.parse(answer, FUNCS).final_answer == "明天有雨。"


@pytest.mark.parametrize("protocol", sorted(p for p in FORMATS if agent_format(p).kagentbench_key))
@pytest.mark.parametrize(("tool", "args"), [("get_weather", {"city": "北京"}), ("now", {})])
def test_official_kagentbench_reader_finds_every_rendered_call(protocol: str, tool: str,
                                                                args: dict[str, Any]) -> None:
    # What synthesis trains on is what the benchmark's own reader scores.
    from agentune.tasks.evaluate.benchmarks.kagentbench.parsing import read_plan

    call = ToolCallStep("check", tool, args)
    text = render_step(protocol, call)
    reading = read_plan(protocol, text, FUNCS, parser="official")
    assert (reading.tool_name, reading.tool_args) == (tool, args)
    if protocol == "react" and not args:
        assert text.endswith("Action Input: ")  # not "{}", which would be read as a value


def test_multi_argument_react_input_is_one_json_text() -> None:
    # ReAct passes one input: a multi-argument call is written as JSON text, read back as the
    # arguments (the official KAgentBench reader keeps it as text under the first parameter:
    # kagentbench/parsing.official_react); a plain input is the first parameter's value.
    text = render_step("react", ToolCallStep("t", "get_weather", {"city": "Oslo", "day": "mon"}))
    assert parse_answer("react", text, FUNCS).tool_args == {"city": "Oslo", "day": "mon"}
    other = "Action: get_weather\nAction Input: Oslo, tomorrow"
    assert parse_answer("react", other, FUNCS).tool_args == {"city": "Oslo, tomorrow"}


def test_toolllama_give_up_and_unsupported_steps() -> None:
    text = render_step("toolllama", GiveUpStep("no tool fits"))
    assert parse_answer("toolllama", text).gave_up
    with pytest.raises(ValueError, match="react.*GiveUpStep"):
        render_step("react", GiveUpStep("x"))


def test_history_renders_in_each_formats_own_way() -> None:
    done = [CompletedTask("look up", "web_search", {"query": "MAT"}, "MAT is a tuning method")]
    assert "Observation: MAT is a tuning method" in agent_format("react").render_history(done)
    assert "<|startofexec|>MAT is a tuning method<|endofexec|>" in agent_format(
        "modelscope").render_history(done)
    assert agent_format("kuaiagent").render_history(done, "zh").startswith("任务 1: look up")
    assert "returned: MAT is a tuning method" in agent_format("autogpt").render_history(done)


@pytest.mark.parametrize("text, value, repairs", [
    ('{"a": 1}', {"a": 1}, []),
    ('x {"a": "}{"} y', {"a": "}{"}, ["surrounding_text"]),
    ('{"a": "b: c", d: 2}', {"a": "b: c", "d": 2}, ["bare_key"]),
    ('{"a": [1, 2}', {"a": [1, 2]}, ["stray_closer", "unbalanced_braces"]),
    ('{"a": "line\nbreak"}', {"a": "line\nbreak"}, ["raw_newline"]),
    ('{"a": "cut', {"a": "cut"}, ["unclosed_string", "unbalanced_braces"]),
    ('no braces at all', None, []),
    ("{'a': 1}", None, []),
])
def test_json_repair(text: str, value: Any, repairs: list[str]) -> None:
    reading = read_json_object(text)
    assert reading.value == value
    assert set(repairs) <= set(reading.repairs)


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_parallel_calls_round_trip_in_every_format(protocol: str) -> None:
    step = ToolCallStep("check both", "get_weather", {"city": "Oslo", "day": "mon"},
                        parallel=(("web_search", {"query": "Oslo events"}),
                                  ("get_weather", {"city": "Bergen", "day": "tue"})))
    text = render_step(protocol, step)
    read = parse_answer(protocol, text, FUNCS)
    assert read.calls == [("get_weather", {"city": "Oslo", "day": "mon"}),
                          ("web_search", {"query": "Oslo events"}),
                          ("get_weather", {"city": "Bergen", "day": "tue"})], text
    # One call still reads as one call, with nothing parallel.
    single = parse_answer(protocol, render_step(protocol, ToolCallStep("t", "web_search",
                                                                       {"query": "x"})), FUNCS)
    assert single.calls == [("web_search", {"query": "x"})] and single.more_calls == ()
