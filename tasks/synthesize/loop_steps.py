"""One planning step of the agent loop: the teacher request, reading its answer as a decision, and
the completion a training row shows for it.

The formats' own parsers (``agent_formats``) read answers exactly as KAgentBench does; synthesis
needs a little more from them, added here rather than changed there:

- a ReAct ``Action Input`` that is a JSON object is the call's arguments (the benchmark parser
  maps the whole input to the tool's first parameter, which only fits one-argument tools), and a
  JSON scalar input is decoded for a non-string first parameter;
- a ModelScope thought is the text before ``<|startofthink|>`` (the benchmark never reads it);
- a ReAct thought loses its ``Thought:`` label.

Structured output: for the JSON formats (AutoGPT, KuaiAgent) the response format is the format's
own JSON with one ``anyOf`` branch per offered tool (name as a ``const``, that tool's argument
schema inside) plus the finishing command, so a grammar-constrained teacher can only write an
answer that parses, names an offered tool and fills its arguments. With ``structured_output: all``
the text formats get a neutral ``{"thought", "action", "action_input"} | {"thought",
"final_answer"}`` schema and the step is rendered in the template's format afterwards.

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


def step_schema(protocol: str, tools: Sequence[ToolSpec], *, text_max_chars: int,
                answer_max_chars: int) -> dict[str, Any]:
    """The JSON schema a structured planning answer must follow (see the module docstring)."""
    fmt = agent_format(protocol)
    thought = _string(text_max_chars)
    answer = _string(answer_max_chars)
    branches: list[dict[str, Any]] = []
    if fmt.name == "kuaiagent":
        def command(name: str, args: dict[str, Any]) -> dict[str, Any]:
            return _object({"task_name": thought,
                            "command": _object({"name": {"const": name}, "args": args})})
        branches = [command(t.name, argument_schema(t, text_max_chars)) for t in tools]
        branches.append(command(fmt.finish_tool or "task_complete", _NO_ARGS))
    elif fmt.name == "autogpt":
        thoughts = _object({"text": thought, **{k: thought for k in AUTOGPT_DETAILS}}, ["text"])

        def command(name: str, args: dict[str, Any]) -> dict[str, Any]:
            return _object({"thoughts": thoughts,
                            "command": _object({"name": {"const": name}, "args": args})})
        branches = [command(t.name, argument_schema(t, text_max_chars)) for t in tools]
        branches.append(command(fmt.finish_tool or "finish", _object({"response": answer})))
    else:
        branches = [_object({"thought": thought, "action": {"const": t.name},
                             "action_input": argument_schema(t, text_max_chars)}) for t in tools]
        branches.append(_object({"thought": thought, "final_answer": answer}))
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def step_request(messages: list[dict[str, Any]], *, protocol: str, tools: Sequence[ToolSpec],
                 structured: bool, temperature: float, max_tokens: int, seed: int,
                 text_max_chars: int, answer_max_chars: int) -> ChatRequest:
    """The teacher request for one planning step."""
    response_format = None
    stop = None
    if structured:
        schema = step_schema(protocol, tools, text_max_chars=text_max_chars,
                             answer_max_chars=answer_max_chars)
        # Not strict: tool schemas rarely meet OpenAI's strict-mode rules (every property
        # required, no anyOf at the root); vLLM and the local provider constrain either way.
        response_format = {"type": "json_schema", "json_schema": {
            "name": f"{agent_format(protocol).name}_step", "schema": schema, "strict": False}}
    else:
        stop = STOPS.get(agent_format(protocol).name)
    return ChatRequest(messages=messages, response_format=response_format,
                       temperature=temperature, max_tokens=max_tokens, seed=seed, stop=stop)


# --------------------------------------------------------------------------- reading answers

_REACT_INPUT = re.compile(r"Action Input:(.+?)(?=Observation|\Z)", re.DOTALL)
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


def _react_arguments(text: str, tool: ToolSpec | None, parsed: dict[str, Any]) -> dict[str, Any]:
    match = _REACT_INPUT.search(text)
    if match is None:
        return parsed
    raw = match.group(1).strip()
    try:
        value = json.loads(raw)
    except ValueError:
        return parsed
    if isinstance(value, dict):
        return value
    first = _first_parameter(tool)
    if first is None or isinstance(value, list):
        return parsed
    name, spec = first
    if isinstance(value, str) or spec.get("type") != "string":
        return {name: value}
    return parsed


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
        args = step.tool_args
        if fmt.name == "react":
            args = _react_arguments(text, by_name.get(step.tool_name), args)
        details: dict[str, str] = {}
        if fmt.name == "autogpt":
            thoughts = (read_json_object(text).value or {}).get("thoughts")
            if isinstance(thoughts, dict):
                details = {k: thoughts[k] for k in AUTOGPT_DETAILS
                           if isinstance(thoughts.get(k), str) and thoughts[k].strip()}
        return Decision("call", thought, step.tool_name, dict(args), details=details,
                        repairs=step.repairs)
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
    if isinstance(data.get("action"), str) and data["action"].strip():
        args = data.get("action_input")
        return Decision("call", thought, data["action"].strip(),
                        dict(args) if isinstance(args, Mapping) else {}, repairs=repairs)
    return Decision("unreadable", repairs=repairs,
                    problem="expected {thought, action, action_input} or {thought, final_answer}")


# --------------------------------------------------------------------------- completions


def _react_call(thought: str, tool: str, args: Mapping[str, Any]) -> str:
    """A ReAct call whose one argument is not the tool's first parameter: the input is written
    as a JSON object (the plain value would be read as the first parameter)."""
    lines = [f"Thought: {thought}" if thought else "", f"Action: {tool}",
             f"Action Input: {json.dumps(dict(args), ensure_ascii=False)}"]
    return "\n".join(line for line in lines if line)


def completion_text(protocol: str, decision: Decision, tools: Sequence[ToolSpec] = ()) -> str:
    """The step written in ``protocol``'s format, as a training completion."""
    fmt = agent_format(protocol)
    if decision.kind == "call":
        if fmt.name == "react" and len(decision.args) == 1:
            tool = next((t for t in tools if t.name == decision.tool), None)
            first = _first_parameter(tool)
            if first is None or first[0] not in decision.args:
                return _react_call(decision.thought, decision.tool, decision.args)
        return fmt.render(ToolCallStep(decision.thought, decision.tool, decision.args,
                                       decision.details))
    if decision.kind == "finish":
        if fmt.two_stage:
            return fmt.render(ToolCallStep(decision.thought, fmt.finish_tool or "", {}))
        return fmt.render(FinalAnswerStep(decision.answer or "", decision.thought))
    raise ValueError(f"a {decision.kind} step has no completion")
