"""Planning steps: a recorded completion reads back to the same decision in every format, the
structured-output schemas accept exactly the offered tools with valid arguments, and the readings
synthesis adds on top of the benchmark parsers."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from jsonschema import Draft202012Validator

from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.formats import FORMATS
from agentune.tasks.synthesize.loop_steps import (
    Decision,
    StepFormats,
    answer_schema,
    completion_text,
    conclusion_format,
    facts_pattern,
    read_conclusion,
    read_decision,
    step_request,
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


FACTS = ["Friday|周五", "SF-1.5 (B)"]


def _xgrammar_admits(schema: dict, answer: dict) -> bool:
    """Whether xgrammar, as the local provider compiles a schema, admits the answer as JSON."""
    vocab = [chr(i) for i in range(32, 127)] + ["<eos>"]
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1]))
    grammar = compiler.compile_json_schema(json.dumps(schema, ensure_ascii=False),
                                           any_whitespace=False)
    matcher = xgr.GrammarMatcher(grammar)
    return matcher.accept_string(json.dumps(answer, ensure_ascii=False)) and matcher.is_completed()


@pytest.mark.parametrize("answer, admitted", [
    ("It ships on Friday, order SF-1.5 (B).", True),
    ("周五发货：SF-1.5 (B)", True),                  # either wording of Friday|周五
    ("Friday SF-1.5 (B)", True),
    ("Friday, then nothing else.", False),           # a fact missing
    ("SF-1.5 (B) ships on Friday", False),           # in the scenario's order
    ("FridaySF-1.5 (B)", False),                     # facts run together
    ("It ships on Friday, SF-1x5 (B)", False),       # a special character is literal
    ("x" * 41 + "Friday SF-1.5 (B)", False),         # a piece of own text over its bound
])
def test_the_facts_grammar_admits_only_answers_stating_every_fact(answer: str,
                                                                 admitted: bool) -> None:
    schema = {"type": "object", "properties": {"a": answer_schema(300, FACTS, 40)},
              "required": ["a"], "additionalProperties": False}
    assert Draft202012Validator(schema).is_valid({"a": answer}) is admitted
    assert _xgrammar_admits(schema, {"a": answer}) is admitted


def test_the_facts_grammar_at_the_default_sizes_compiles_for_a_real_tokenizer() -> None:
    # synthesis's defaults (answer_max_chars 1200, text_max_chars 300) make pieces of own text
    # of up to 300 characters: more than one bounded repetition xgrammar 0.2.8 compiles (128)
    # with a real vocabulary before a one-wording fact (its check fails: every guided answer
    # held to such facts was teacher_failed).
    from transformers import AutoTokenizer

    from agentune.tasks.llm.embedded_model import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    schema = {"type": "object", "properties": {"a": answer_schema(1200, ["CA1501", "MU5102"],
                                                                   300)}, "required": ["a"]}
    compiler.compile_json_schema(json.dumps(schema, ensure_ascii=False), strict_mode=False)


@pytest.mark.parametrize("before, admitted", [(0, True), (129, True), (300, True), (301, False)])
def test_own_text_over_128_characters_keeps_its_bound(before: int, admitted: bool) -> None:
    schema = {"type": "object", "properties": {"a": answer_schema(1200, FACTS, 300)},
              "required": ["a"], "additionalProperties": False}
    answer = {"a": "x" * before + "Friday SF-1.5 (B)"}
    assert Draft202012Validator(schema).is_valid(answer) is admitted
    assert _xgrammar_admits(schema, answer) is admitted


def test_facts_wordings_a_json_string_cannot_hold_unescaped_are_left_out() -> None:
    free = r'[^"\\\x00-\x1f]{0,10}'
    assert facts_pattern(['say "hi"|hello', 'a\\b'], 10) == f"^{free}(?:hello){free}$"
    assert answer_schema(100, ['"quoted"']) == {"type": "string", "minLength": 1, "maxLength": 100}
    assert answer_schema(100, []) == answer_schema(100)


@pytest.mark.parametrize("protocol", sorted(FORMATS))
def test_a_step_held_to_the_facts_finishes_only_with_them(protocol: str) -> None:
    schema = step_schema(protocol, TOOLS, text_max_chars=100, answer_max_chars=400,
                         answer_facts=FACTS)

    def answer(decision: Decision) -> dict:
        if uses_structured_output(protocol, "json_protocols"):
            return json.loads(completion_text(protocol, decision, TOOLS))
        if decision.kind == "finish":
            return {"thought": decision.thought, "final_answer": decision.answer}
        return {"thought": decision.thought, "action": decision.tool,
                "action_input": decision.args}

    call = Decision("call", "weather", "get_weather", {"location": "Oslo"})
    stated = Decision("finish", "done", answer="On Friday: SF-1.5 (B).")
    missing = Decision("finish", "done", answer="On Friday.")
    validator = Draft202012Validator(schema)
    assert validator.is_valid(answer(call))
    if protocol == "kuaiagent":  # its finish carries no answer: the concluder is held instead
        assert validator.is_valid(answer(stated)) and validator.is_valid(answer(missing))
        return
    assert validator.is_valid(answer(stated)) and _xgrammar_admits(schema, answer(stated))
    assert not validator.is_valid(answer(missing))
    assert not _xgrammar_admits(schema, answer(missing))


def test_a_concluder_held_to_the_facts_answers_in_json() -> None:
    response_format = conclusion_format(FACTS, answer_max_chars=300, text_max_chars=40)
    schema = response_format["json_schema"]["schema"]
    assert _xgrammar_admits(schema, {"answer": "周五, SF-1.5 (B)"})
    assert not _xgrammar_admits(schema, {"answer": "周五"})
    assert read_conclusion('{"answer": " 周五, SF-1.5 (B) "}') == "周五, SF-1.5 (B)"
    assert read_conclusion('{"other": 1}') == "" and read_conclusion("not json") == ""


def test_step_formats_are_built_once_and_equal_the_ones_built_per_request() -> None:
    formats = StepFormats()
    settings = {"structured": True, "temperature": 0.0, "max_tokens": 64, "seed": 1,
                "text_max_chars": 100, "answer_max_chars": 400, "max_parallel": 2}
    for protocol in ("kuaiagent", "autogpt", "react"):
        for grammar in ({}, {"finish": False}, {"answer_facts": ["42"]},
                        {"fixed_arguments": {"calculator": [{"expression": "6*7"}]}}):
            messages = [{"role": "user", "content": protocol}]
            fresh = step_request(messages, protocol=protocol, tools=TOOLS, **settings, **grammar)
            first = step_request(messages, protocol=protocol, tools=TOOLS, **settings, **grammar,
                                 formats=formats)
            again = step_request([{"role": "user", "content": "later"}], protocol=protocol,
                                 tools=TOOLS, **settings, **grammar, formats=formats)
            assert first == fresh
            assert again.response_format is not None and first.response_format is not None
            schema = again.response_format["json_schema"]
            assert schema is first.response_format["json_schema"]  # built once, shared
    assert len({id(f) for f in formats._made.values()}) == 12  # one per distinct input


def test_step_formats_tell_fixed_argument_orders_apart_and_keep_the_last_used() -> None:
    formats = StepFormats(size=2)
    settings = {"structured": True, "temperature": 0.0, "max_tokens": 64, "seed": 1,
                "text_max_chars": 100, "answer_max_chars": 400}
    orders = ({"value": 1, "from_unit": "km", "to_unit": "mi"},
              {"to_unit": "mi", "from_unit": "km", "value": 1})
    for arguments in orders:  # the order of a guided call's arguments is its schema's order
        grammar = {"fixed_arguments": {"unit_convert": [arguments]}}
        messages = [{"role": "user", "content": "convert"}]
        fresh = step_request(messages, protocol="autogpt", tools=TOOLS, **settings, **grammar)
        cached = step_request(messages, protocol="autogpt", tools=TOOLS, **settings, **grammar,
                              formats=formats)
        assert json.dumps(cached.response_format) == json.dumps(fresh.response_format)
    assert len(formats._made) == 2
    first = formats.get("react", TOOLS, text_max_chars=100, answer_max_chars=400)
    assert formats.get("react", TOOLS, text_max_chars=100, answer_max_chars=400) is first
    assert len(formats._made) == 2  # the least recently used of the three left
    assert formats.get("react", TOOLS, text_max_chars=100, answer_max_chars=400) is first
