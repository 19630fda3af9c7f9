"""One planning step of the agent loop: the teacher request, reading its answer as a decision, and
the completion a training row shows for it.

The formats' own parsers (``agent_formats``) read answers (several calls in one step are
parallel calls); synthesis needs a little more from them, added here rather than changed there:

- a ReAct ``Action Input`` that is a JSON scalar is decoded for a non-string first parameter;
- a ModelScope thought is the text before ``<|startofthink|>`` (the benchmark never reads it);
- a ReAct thought loses its ``Thought:`` label.

Structured output: for the JSON formats (AutoGPT, KuaiAgent) the response format is the format's
own JSON with one ``anyOf`` branch per offered tool (name as a ``const``, that tool's argument
schema inside), a list of such calls (parallel calls) and the finishing command, so a
grammar-constrained teacher can only write an answer that parses, names an offered tool and fills
its arguments. With ``structured_output: all`` the text formats get a neutral ``{"thought",
"action", "action_input"} | {"thought", "calls": [...]} | {"thought", "final_answer"}`` schema and
the step is rendered in the template's format afterwards.

The completion recorded for a step is always the step rendered canonically in the template's
format (:func:`completion_text`): the teacher's thought, tool, arguments and answer, without
code fences, repairs or a hallucinated ``Observation`` after the call, so it reads back to the
same decision.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentune.tasks.agent.formats import (
    NONE,
    FinalAnswerStep,
    ToolCallStep,
    agent_format,
)
from agentune.tasks.agent.json_reading import read_json_object
from agentune.tasks.llm.types import ChatRequest
from agentune.tasks.tools.arguments import argument_schema
from agentune.tasks.tools.catalog import ToolSpec

StructuredMode = Literal["json_protocols", "all", "off"]
JSON_PROTOCOLS = frozenset({"autogpt", "kuaiagent"})
# Free-text formats: generation stops where the environment would speak next.
STOPS: dict[str, list[str]] = {
    "react": ["\nObservation:"],
    "toolllama": ["\nObservation:"],
    "modelscope": ["<|startofexec|>"],
}
AUTOGPT_DETAILS = ("reasoning", "plan", "criticism", "speak")

DecisionKind = Literal["call", "finish", "give_up", "unreadable"]


@dataclass(frozen=True)
class Decision:
    """What a planning answer decides."""

    kind: DecisionKind
    thought: str = ""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    """The final answer of a finishing step; None where the format's concluder writes it
    (KuaiAgent) or the finish command carried none."""
    details: dict[str, str] = field(default_factory=dict)
    """AutoGPT's optional thought fields (reasoning, plan, criticism, speak)."""
    repairs: tuple[str, ...] = ()
    problem: str = ""
    """Why an answer is unreadable."""
    more: tuple[tuple[str, dict[str, Any]], ...] = ()
    """Further calls of the same step, independent of the first (parallel calls)."""

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.tool, self.args), *self.more] if self.kind == "call" else []


def uses_structured_output(protocol: str, mode: StructuredMode) -> bool:
    return mode == "all" or (mode == "json_protocols" and protocol in JSON_PROTOCOLS)


# --------------------------------------------------------------------------- schemas


def _string(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_chars}


def _object(properties: dict[str, Any], required: Sequence[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties,
            "required": list(properties if required is None else required),
            "additionalProperties": False}


_NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def _one_of(branches: list[dict[str, Any]]) -> dict[str, Any]:
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _fixed(arguments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Arguments that may only be one of these (a guided call)."""
    return _one_of([_object({k: {"const": v} for k, v in args.items()}) for args in arguments])


_FREE_CHAR = r'[^"\\\x00-\x1f]'
"""A character of the teacher's own text in a facts answer: anything a JSON string holds
unescaped (no quote, backslash or control character), so the pattern sees the text as written."""
_REGEX_SPECIAL = frozenset(r"\.^$|?*+()[]{}/-")


def _literal(text: str) -> str:
    return "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in text)


def fact_wordings(fact: str) -> list[str]:
    """The wordings of a fact (``A|B``: either) a facts grammar can write: those a JSON string
    holds unescaped (no quote, backslash or control character)."""
    return [w for w in (w.strip() for w in fact.split("|"))
            if w and not any(c in '"\\' or ord(c) < 0x20 for c in w)]


_MOST_REPEATS = 128
"""The longest bounded repetition xgrammar (0.2.8) compiles in a pattern: ``{0,129}`` fails
its grammar check (``per_rule_fsm_hashes``), whatever the characters repeated."""


def _free_text(least: int, most: int) -> str:
    """``_FREE_CHAR{least,most}``, written as consecutive repetitions of at most
    :data:`_MOST_REPEATS` each (the same strings)."""
    parts, low, left = [], least, most
    while left > _MOST_REPEATS:
        parts.append(f"{_FREE_CHAR}{{{min(low, _MOST_REPEATS)},{_MOST_REPEATS}}}")
        low, left = max(0, low - _MOST_REPEATS), left - _MOST_REPEATS
    return "".join(parts) + f"{_FREE_CHAR}{{{low},{left}}}"


def facts_pattern(facts: Sequence[str], gap_chars: int) -> str:
    """The regex (a JSON-schema ``pattern``) of an answer that states every fact, in order, one
    wording of each ``A|B``: the teacher's text before, between (at least one character, so two
    facts never run together) and after them, each piece at most ``gap_chars`` characters. A
    fact with no wording a JSON string holds unescaped is left out (the verifier still asks for
    it)."""
    gap, between = _free_text(0, gap_chars), _free_text(1, gap_chars)
    stated = ["(?:" + "|".join(_literal(w) for w in wordings) + ")"
              for wordings in map(fact_wordings, facts) if wordings]
    return "^" + gap + between.join(stated) + gap + "$"


def answer_schema(max_chars: int, facts: Sequence[str] | None = None,
                  piece_max_chars: int | None = None) -> dict[str, Any]:
    """A final answer's string schema: free text up to ``max_chars``, or, with ``facts``, text
    that states every one of them (:func:`facts_pattern`: ``max_chars`` shared among the pieces
    of the teacher's own text, each at most ``piece_max_chars``)."""
    if not facts or not any(map(fact_wordings, facts)):
        return _string(max_chars)
    gap = max(1, max_chars // (len(facts) + 1))
    return {"type": "string", "pattern": facts_pattern(facts, min(gap, piece_max_chars or gap))}


def step_schema(protocol: str, tools: Sequence[ToolSpec], *, text_max_chars: int,
                answer_max_chars: int, max_parallel: int = 1, finish: bool = True,
                fixed_arguments: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                answer_facts: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON schema a structured planning answer must follow (see the module docstring).
    With ``max_parallel`` > 1 a step may also carry a list of 2..max_parallel calls; without
    ``finish`` the finishing branch is left out, and a tool in ``fixed_arguments`` may only be
    called with one of those arguments (a guided step). With ``answer_facts`` the finishing
    branch's answer must state them (:func:`answer_schema`, each piece of the teacher's own
    text at most ``text_max_chars``)."""
    fmt = agent_format(protocol)
    thought = _string(text_max_chars)
    answer = answer_schema(answer_max_chars, answer_facts, text_max_chars)
    fixed = fixed_arguments or {}
    args = {t.name: _fixed(fixed[t.name]) if t.name in fixed
            else argument_schema(t, text_max_chars) for t in tools}
    if fmt.name in JSON_PROTOCOLS:
        calls = [_object({"name": {"const": t.name}, "args": args[t.name]}) for t in tools]
        commands = list(calls)
        if calls and max_parallel > 1:
            commands.append({"type": "array", "items": _one_of(calls), "minItems": 2,
                             "maxItems": max_parallel})
        ending = (_object({"name": {"const": fmt.finish_tool or "task_complete"},
                           "args": _NO_ARGS}) if fmt.name == "kuaiagent" else
                  _object({"name": {"const": fmt.finish_tool or "finish"},
                           "args": _object({"response": answer})}))
        if finish:
            commands.append(ending)
        if fmt.name == "kuaiagent":
            return _one_of([_object({"task_name": thought, "command": c}) for c in commands])
        thoughts = _object({"text": thought, **{k: thought for k in AUTOGPT_DETAILS}}, ["text"])
        return _one_of([_object({"thoughts": thoughts, "command": c}) for c in commands])
    calls = [_object({"action": {"const": t.name}, "action_input": args[t.name]}) for t in tools]
    branches = [_object({"thought": thought, **c["properties"]}) for c in calls]
    if calls and max_parallel > 1:
        branches.append(_object({"thought": thought, "calls": {
            "type": "array", "items": _one_of(calls), "minItems": 2, "maxItems": max_parallel}}))
    if finish:
        branches.append(_object({"thought": thought, "final_answer": answer}))
    return _one_of(branches)


def step_format(protocol: str, tools: Sequence[ToolSpec], **grammar: Any) -> dict[str, Any]:
    """A structured planning step's response format: :func:`step_schema` (``grammar``: its
    keyword arguments) as an OpenAI ``json_schema``."""
    # Not strict: tool schemas rarely meet OpenAI's strict-mode rules (every property
    # required, no anyOf at the root); vLLM and the local provider constrain either way.
    return {"type": "json_schema", "json_schema": {
        "name": f"{agent_format(protocol).name}_step",
        "schema": step_schema(protocol, tools, **grammar), "strict": False}}


class StepFormats:
    """Planning steps' response formats, each built once and then shared by every request that
    asks for the same one. A step's schema depends only on the protocol, the tools it admits
    and the grammar's settings, never on the conversation, yet building it (an argument schema
    per tool) had taken ~1 ms a step, a tenth of synthesis' CPU at 64 calls in flight
    (tests/benchmarks/test_synthesis_throughput.py). Tools are told apart by name: one instance
    serves one catalog (an agent loop's), and a format handed out must not be changed. It keeps
    the ``size`` formats used last (a guided step's fixed arguments make a format per scenario
    step, so a run would otherwise keep them all)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._made: dict[str, dict[str, Any]] = {}
        """Formats by their inputs, the one used last last."""

    def get(self, protocol: str, tools: Sequence[ToolSpec], **grammar: Any) -> dict[str, Any]:
        """:func:`step_format` of these inputs, built on first use."""
        # Keys in the order written, not sorted: a guided call's fixed arguments become its
        # schema's properties in their order, so two orders are two formats.
        key = json.dumps([protocol, [t.name for t in tools], grammar], ensure_ascii=False)
        made = self._made.pop(key, None)
        if made is None:
            made = step_format(protocol, tools, **grammar)
            if len(self._made) >= self.size:
                del self._made[next(iter(self._made))]
        self._made[key] = made
        return made


def step_request(messages: list[dict[str, Any]], *, protocol: str, tools: Sequence[ToolSpec],
                 structured: bool, temperature: float, max_tokens: int, seed: int,
                 text_max_chars: int, answer_max_chars: int,
                 max_parallel: int = 1, finish: bool = True, frequency_penalty: float = 0.0,
                 fixed_arguments: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                 answer_facts: Sequence[str] | None = None,
                 formats: StepFormats | None = None) -> ChatRequest:
    """The teacher request for one planning step (``tools``, ``finish``, ``fixed_arguments``
    and ``answer_facts``: what its grammar admits, see :func:`step_schema`); ``formats``: where
    its response format is built once and reused (default: built for this request)."""
    response_format = None
    stop = None
    if structured:
        grammar = {"text_max_chars": text_max_chars, "answer_max_chars": answer_max_chars,
                   "max_parallel": max_parallel, "finish": finish,
                   "fixed_arguments": fixed_arguments, "answer_facts": answer_facts}
        response_format = (formats.get(protocol, tools, **grammar) if formats is not None
                           else step_format(protocol, tools, **grammar))
    else:
        stop = STOPS.get(agent_format(protocol).name)
    return ChatRequest(messages=messages, response_format=response_format,
                       temperature=temperature, max_tokens=max_tokens, seed=seed, stop=stop,
                       frequency_penalty=frequency_penalty)


def conclusion_format(facts: Sequence[str], *, answer_max_chars: int,
                      text_max_chars: int) -> dict[str, Any]:
    """The response format of a concluder held to the facts (a guided attempt of a two-stage
    format): ``{"answer": ...}``, the answer under :func:`answer_schema`."""
    schema = _object({"answer": answer_schema(answer_max_chars, facts, text_max_chars)})
    return {"type": "json_schema",
            "json_schema": {"name": "conclusion", "schema": schema, "strict": False}}


def read_conclusion(text: str | None) -> str:
    """The answer of a concluder held to the facts (``""`` when it is not there)."""
    answer = (read_json_object(text).value or {}).get("answer")
    return answer.strip() if isinstance(answer, str) else ""


# --------------------------------------------------------------------------- reading answers

_THOUGHT_LABEL = re.compile(r"^\s*Thought\s*:\s*")


def clean_thought(text: str | None) -> str:
    if not text or text == NONE:
        return ""
    return _THOUGHT_LABEL.sub("", text).strip()


def _first_parameter(tool: ToolSpec | None) -> tuple[str, dict[str, Any]] | None:
    properties = (tool.parameters.get("properties") if tool else None) or {}
    if not properties:
        return None
    name = next(iter(properties))
    spec = properties[name]
    return name, spec if isinstance(spec, dict) else {}


def _typed_input(tool: ToolSpec | None, args: dict[str, Any]) -> dict[str, Any]:
    """A ReAct input read as the first parameter's text, decoded when that parameter is not a
    string and the text is a JSON scalar (``3`` for an integer)."""
    first = _first_parameter(tool)
    if first is None or list(args) != [first[0]] or not isinstance(args[first[0]], str):
        return args
    name, spec = first
    try:
        value = json.loads(args[name])
    except ValueError:
        return args
    if isinstance(value, dict | list) or (spec.get("type") == "string"
                                          and not isinstance(value, str)):
        return args
    return {name: value}


def read_decision(protocol: str, text: str | None, tools: Sequence[ToolSpec], *,
                  structured: bool) -> Decision:
    """A planning answer read as a decision (``unreadable`` with the problem when it is not one)."""
    fmt = agent_format(protocol)
    text = text or ""
    if structured and fmt.name not in JSON_PROTOCOLS:
        return _read_neutral(text)
    by_name = {t.name: t for t in tools}
    step = fmt.parse(text, [{"name": t.name, "description": t.description,
                             "parameters": t.parameters} for t in tools])
    thought = clean_thought(step.thought)
    if fmt.name == "modelscope" and step.calls_tool:
        thought = text[: text.find(fmt.START)].strip() if fmt.START in text else ""
    if step.gave_up:
        return Decision("give_up", thought, repairs=step.repairs)
    if fmt.finish_tool is not None and step.tool_name == fmt.finish_tool:
        if fmt.two_stage:
            return Decision("finish", thought, repairs=step.repairs)
        return Decision("finish", thought, answer=step.final_answer, repairs=step.repairs,
                        problem="" if step.final_answer is not None else
                        f"the {fmt.finish_tool} command carries no final answer")
    if step.calls_tool:
        calls = [(name, _typed_input(by_name.get(name), dict(args)) if fmt.name == "react"
                  else dict(args)) for name, args in step.calls]
        details: dict[str, str] = {}
        if fmt.name == "autogpt":
            thoughts = (read_json_object(text).value or {}).get("thoughts")
            if isinstance(thoughts, dict):
                details = {k: thoughts[k] for k in AUTOGPT_DETAILS
                           if isinstance(thoughts.get(k), str) and thoughts[k].strip()}
        return Decision("call", thought, calls[0][0], calls[0][1], details=details,
                        repairs=step.repairs, more=tuple(calls[1:]))
    if step.final_answer is not None:
        return Decision("finish", thought, answer=step.final_answer, repairs=step.repairs)
    return Decision("unreadable", repairs=step.repairs,
                    problem=f"no tool call and no final answer in the {fmt.name} format")


def _read_neutral(text: str) -> Decision:
    """A structured answer of a text format: ``{"thought", "action", "action_input"}`` or
    ``{"thought", "final_answer"}``."""
    reading = read_json_object(text)
    data = reading.value or {}
    thought = clean_thought(data.get("thought") if isinstance(data.get("thought"), str) else "")
    repairs = tuple(reading.repairs)
    if isinstance(data.get("final_answer"), str):
        return Decision("finish", thought, answer=data["final_answer"], repairs=repairs)
    items = data.get("calls") if isinstance(data.get("calls"), list) else [data]
    calls = [(item["action"].strip(), dict(item["action_input"])
              if isinstance(item.get("action_input"), Mapping) else {})
             for item in items if isinstance(item, Mapping)
             and isinstance(item.get("action"), str) and item["action"].strip()]
    if calls:
        return Decision("call", thought, calls[0][0], calls[0][1], repairs=repairs,
                        more=tuple(calls[1:]))
    return Decision("unreadable", repairs=repairs, problem="expected {thought, action, "
                    "action_input}, {thought, calls: [...]} or {thought, final_answer}")


# --------------------------------------------------------------------------- completions


def _react_input(tool: ToolSpec | None, args: Mapping[str, Any]) -> str:
    """A call's ReAct input: the plain value when its one argument is the tool's first parameter
    (as KAgentBench writes it), else the arguments as one JSON object ("" for none)."""
    first = _first_parameter(tool)
    if not args:
        return ""
    if first is not None and list(args) == [first[0]]:
        value = args[first[0]]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return json.dumps(dict(args), ensure_ascii=False)


def completion_text(protocol: str, decision: Decision, tools: Sequence[ToolSpec] = ()) -> str:
    """The step written in ``protocol``'s format, as a training completion."""
    fmt = agent_format(protocol)
    if decision.kind == "call":
        if fmt.name == "react":
            by_name = {t.name: t for t in tools}
            lines = [f"Thought: {decision.thought}" if decision.thought else ""]
            for name, args in decision.calls():
                lines += [f"Action: {name}", f"Action Input: {_react_input(by_name.get(name), args)}"]
            return "\n".join(line for line in lines if line)
        return fmt.render(ToolCallStep(decision.thought, decision.tool, decision.args,
                                       decision.details, parallel=decision.more))
    if decision.kind == "finish":
        if fmt.two_stage:
            return fmt.render(ToolCallStep(decision.thought, fmt.finish_tool or "", {}))
        return fmt.render(FinalAnswerStep(decision.answer or "", decision.thought))
    raise ValueError(f"a {decision.kind} step has no completion")
