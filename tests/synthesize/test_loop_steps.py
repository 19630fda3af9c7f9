"""Planning steps: a recorded completion reads back to the same decision in every format, the
structured-output schemas accept exactly the offered tools with valid arguments, and the readings
synthesis adds on top of the benchmark parsers."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.formats import FORMATS
from agentune.tasks.synthesize.loop_steps import (
    Decision,
    completion_text,
    read_decision,
    step_schema,
    uses_structured_output,
)
from agentune.tasks.tools.arguments import argument_schema
from agentune.tasks.tools.catalog import ToolSpec, load_tool_catalog

CATALOG = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}
TOOLS = [CATALOG[n] for n in ("calculator", "get_weather", "unit_convert")]

CALLS = [
    Decision("call", "add them", "calculator", {"expression": "2+3"}),
    Decision("call", "", "calculator", {"expression": "2+3", "precision": 2}),
    Decision("call", "weather next", "get_weather", {"location": "Oslo", "days": 3}),
    # One argument that is not the tool's first parameter.
    Decision("call", "units", "get_weather", {"units": "imperial", "location": "Oslo"}),
    Decision("call", "convert", "unit_convert", {"value": 5, "from_unit": "km", "to_unit": "mi"}),
    Decision("call", "非 ASCII 的想法", "get_weather", {"location": "北京"}),
]


@pytest.mark.parametrize("protocol", sorted(FORMATS))
@pytest.mark.parametrize("decision", CALLS, ids=lambda d: f"{d.tool}-{len(d.args)}")
def test_a_call_completion_reads_back_to_the_same_call(protocol: str, decision: Decision) -> None:
    text = completion_text(protocol, decision, TOOLS)
    back = read_decision(protocol, text, TOOLS, structured=False)
    assert (back.kind, back.tool, back.args) == ("call", decision.tool, decision.args)
    assert back.thought == decision.thought


def test_a_single_argument_that_is_not_the_first_parameter_stays_named() -> None:
    decision = Decision("call", "", "get_weather", {"units": "imperial"})
    text = completion_text("react", decision, TOOLS)
    assert text == 'Action: get_weather\nAction Input: {"units": "imperial"}'
    assert read_decision("react", text, TOOLS, structured=False).args == {"units": "imperial"}


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_a_finish_completion_reads_back_as_a_finish(protocol: str) -> None:
    decision = Decision("finish", "I know it", answer="Oslo will be sunny.")
    back = read_decision(protocol, completion_text(protocol, decision), TOOLS, structured=False)
    assert back.kind == "finish"
    if protocol == "kuaiagent":
        assert back.answer is None  # the concluder writes it
    else:
        assert back.answer == "Oslo will be sunny."


def test_readings_beyond_the_benchmark_parsers() -> None:
    react = "Thought: I should add\nAction: calculator\nAction Input: 2+3\nObservation: 5"
    assert read_decision("react", react, TOOLS, structured=False) == Decision(
        "call", "I should add", "calculator", {"expression": "2+3"})
    typed = "Action: unit_convert\nAction Input: 5"
    assert read_decision("react", typed, TOOLS, structured=False).args == {"value": 5}
    modelscope = ('Let me check.<|startofthink|>```JSON\n{"api_name": "get_weather", '
                  '"parameters": {"location": "Oslo"}}\n```<|endofthink|>')
    step = read_decision("modelscope", modelscope, TOOLS, structured=False)
    assert (step.thought, step.tool, step.args) == ("Let me check.", "get_weather",
                                                     {"location": "Oslo"})
    fenced = '```json\n{"task_name": "t", "command": {"name": "calculator", "args": ' \
             '{"expression": "1"}}}\n```'
    assert read_decision("kuaiagent", fenced, TOOLS, structured=False).repairs == ("code_fence",)
    giving_up = 'Thought: no\nAction: Finish\nAction Input: {"return_type": "give_up_and_restart"}'
    assert read_decision("toolllama", giving_up, TOOLS, structured=False).kind == "give_up"
    no_answer = '{"thoughts": {"text": "t"}, "command": {"name": "finish", "args": {}}}'
    empty = read_decision("autogpt", no_answer, TOOLS, structured=False)
    assert empty.kind == "finish" and empty.answer is None and "no final answer" in empty.problem
    assert read_decision("kuaiagent", "no json here", TOOLS, structured=False).kind == "unreadable"


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_structured_schemas_accept_the_offered_calls_and_nothing_else(protocol: str) -> None:
    schema = step_schema(protocol, TOOLS, text_max_chars=100, answer_max_chars=400)
    validator = Draft202012Validator(schema)
    structured = uses_structured_output(protocol, "all")
    assert structured
    json_format = uses_structured_output(protocol, "json_protocols")

    def answer(decision: Decision) -> dict:
        if json_format:
            return json.loads(completion_text(protocol, decision, TOOLS))
        if decision.kind == "finish":
            return {"thought": decision.thought, "final_answer": decision.answer}
        return {"thought": decision.thought, "action": decision.tool,
                "action_input": decision.args}

    good = Decision("call", "weather", "get_weather", {"location": "Oslo", "days": 2})
    assert validator.is_valid(answer(good))
    read = read_decision(protocol, json.dumps(answer(good)), TOOLS, structured=True)
    assert (read.tool, read.args) == ("get_weather", {"location": "Oslo", "days": 2})
    finish = Decision("finish", "done", answer="Sunny.")
    assert validator.is_valid(answer(finish))
    for bad in (Decision("call", "x", "search_flights", {"origin": "Oslo"}),  # not offered
                Decision("call", "x", "get_weather", {"city": "Oslo"}),  # wrong argument
                Decision("call", "x" * 101, "get_weather", {"location": "Oslo"})):  # too long
        assert not validator.is_valid(answer(bad))


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_a_schema_without_the_finish_admits_only_the_calls(protocol: str) -> None:
    tools = [CATALOG["get_weather"]]
    validator = Draft202012Validator(step_schema(protocol, tools, text_max_chars=100,
                                                 answer_max_chars=400, finish=False))
    call = Decision("call", "weather", "get_weather", {"location": "Oslo"})
    finish = Decision("finish", "done", answer="Sunny.")
    if uses_structured_output(protocol, "json_protocols"):
        answers = [json.loads(completion_text(protocol, d, tools)) for d in (call, finish)]
    else:
        answers = [{"thought": "weather", "action": "get_weather",
                    "action_input": {"location": "Oslo"}},
                   {"thought": "done", "final_answer": "Sunny."}]
    assert validator.is_valid(answers[0])
    assert not validator.is_valid(answers[1])


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_fixed_arguments_admit_only_those_calls(protocol: str) -> None:
    tools = [CATALOG["get_weather"]]
    validator = Draft202012Validator(step_schema(
        protocol, tools, text_max_chars=100, answer_max_chars=400, max_parallel=2,
        fixed_arguments={"get_weather": [{"location": "Oslo"}, {"location": "北京", "days": 2}]}))

    def answer(args: dict) -> dict:
        call = Decision("call", "weather", "get_weather", args)
        if uses_structured_output(protocol, "json_protocols"):
            return json.loads(completion_text(protocol, call, tools))
        return {"thought": "weather", "action": "get_weather", "action_input": args}

    assert validator.is_valid(answer({"location": "Oslo"}))
    assert validator.is_valid(answer({"location": "北京", "days": 2}))
    assert not validator.is_valid(answer({"location": "Bergen"}))
    assert not validator.is_valid(answer({"location": "北京"}))


def test_argument_schemas_bound_free_strings_only() -> None:
    schema = argument_schema(CATALOG["get_weather"], 50)
    props = schema["properties"]
    assert props["location"]["maxLength"] == 50
    assert "maxLength" not in props["units"]  # an enum is bounded already
    # A format bounds a string already (and xgrammar does not combine it with a length).
    assert "maxLength" not in props["date"] and props["date"]["format"] == "date"
    assert CATALOG["get_weather"].parameters["properties"]["location"].get("maxLength") is None
    with_refs = ToolSpec("t", "d", {"type": "object", "$defs": {"a": {"type": "string"}},
                                    "properties": {"x": {"$ref": "#/$defs/a"}}})
    assert argument_schema(with_refs, 50) == {"type": "object"}
