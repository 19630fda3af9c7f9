"""The agent output formats (protocols): how a step is written, and how an answer is read back.

One class per format keeps its renderer and its parser together: template
synthesis writes each step's completion with :func:`render_step`, evaluation and RL read model
answers with :func:`parse_answer`, so both sides agree on one definition of every format.

Formats, by protocol name (and by their KAgentBench template key):

- ``react`` (``ReACT``): ``Thought: ...`` / ``Action: <tool>`` / ``Action Input: <value>`` /
  ``Observation: ...`` ... ``Final Answer: ...``.
- ``autogpt`` (``AutoGPT``): one JSON object ``{"thoughts": {"text", ...}, "command": {"name",
  "args"}}``; the command ``finish`` with ``{"response": ...}`` gives the final answer.
- ``toolllama`` (``ToolLlama``): ``Thought:`` / ``Action:`` / ``Action Input: {json}``; the action
  ``Finish`` with ``return_type`` ``give_answer`` (and ``final_answer``) answers,
  ``give_up_and_restart`` abandons the attempt so the caller can start over.
- ``modelscope`` (``ModelScope``): free text, a call written as
  ``<|startofthink|>```JSON {"api_name", "parameters"}```<|endofthink|>``; text without a call is
  the final answer.
- ``kuaiagent`` (``KuaiAgent``): two templates. The planner answers one JSON task
  ``{"task_name", "command": {"name", "args"}}`` per step, ``task_complete`` when it can answer, at
  most five steps; the concluder then writes the final answer as plain text.

What a parser extracts is exactly what KAgentBench's evaluator extracts
(KAgentBench's format): ``thought``, ``tool_name`` (both ``"None"`` when absent or
empty) and ``tool_args`` (``{}``); in particular the ReAct thought is the raw text before the
first ``Action``/``Final Answer`` (a leading ``Thought:`` label included), the ReAct arguments are
``{<the tool's first parameter>: <raw Action Input text>}``, and the ModelScope thought is never
read. On top of that, :class:`AgentStep` carries what the benchmark ignores: the final answer, a
ToolLLaMA give-up, and the repairs the answer needed.

Differences from the official script, all on malformed answers only: JSON is also found inside
code fences, after leading prose and before trailing text (the official script needs the text to
end in ``}\\n}`` or to be bare JSON), brace counting ignores braces inside strings, and a
ModelScope call whose ``<|endofthink|>`` was cut off is still read. Its quirks (an empty ReAct
answer reusing the previous template's parse, an empty thought staying ``""``) are not copied.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentune.tasks.agent.json_reading import read_json_object, strip_code_fence

NONE = "None"
"""What KAgentBench writes for a thought or tool name an answer does not give."""


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class AgentStep:
    """A model answer read in its format."""

    thought: str = NONE
    tool_name: str = NONE
    tool_args: dict[str, Any] = field(default_factory=dict)
    final_answer: str | None = None
    """The answer to the user, when the step gives one (in the format's own way)."""
    gave_up: bool = False
    """ToolLLaMA's ``give_up_and_restart``: the attempt is abandoned."""
    repairs: tuple[str, ...] = ()
    """What was repaired or tolerated to read the answer (``code_fence``, ``bare_key`` ...)."""
    more_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    """Further calls made in the same step, independent of the first (parallel calls)."""

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every call of the step, the first one first."""
        return [(self.tool_name, self.tool_args), *self.more_calls] if self.calls_tool else []

    @property
    def calls_tool(self) -> bool:
        return self.tool_name != NONE

    @property
    def understood(self) -> bool:
        """Whether the answer said anything the format defines: a call, an answer or a give-up."""
        return self.calls_tool or self.final_answer is not None or self.gave_up

    def kagentbench(self) -> tuple[str, str, dict[str, Any]]:
        """(thought, tool_name, tool_args): what KAgentBench scores."""
        return self.thought, self.tool_name, self.tool_args


@dataclass(frozen=True)
class ToolCallStep:
    """A step that calls a tool, and possibly more at once (``parallel``: independent calls made
    in the same step). ``details`` are extra thought fields a format may show (AutoGPT:
    ``reasoning``, ``plan``, ``criticism``, ``speak``); others ignore them."""

    thought: str
    tool_name: str
    tool_args: Mapping[str, Any] = field(default_factory=dict)
    details: Mapping[str, str] = field(default_factory=dict)
    parallel: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    def calls(self) -> list[tuple[str, Mapping[str, Any]]]:
        return [(self.tool_name, self.tool_args), *self.parallel]


@dataclass(frozen=True)
class FinalAnswerStep:
    """A step that answers the user. In KuaiAgent this is the concluder's completion."""

    answer: str
    thought: str = ""


@dataclass(frozen=True)
class GiveUpStep:
    """ToolLLaMA only: abandon this attempt and restart."""

    thought: str


Step = ToolCallStep | FinalAnswerStep | GiveUpStep


@dataclass(frozen=True)
class CompletedTask:
    """One earlier step and what its tool returned: the Memory a template shows."""

    thought: str
    tool_name: str
    tool_args: Mapping[str, Any] = field(default_factory=dict)
    observation: str = ""


def _or_none(text: str | None) -> str:
    text = (text or "").strip()
    return text or NONE


def _dict_or_empty(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def tool_entries(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as ``{name, description, parameters}``: accepts KAgentBench ``funcs`` entries, our
    ``tools`` rows and OpenAI ``{"type": "function", "function": {...}}`` entries alike."""
    entries = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        entries.append(
            {
                "name": str(fn.get("name", "")),
                "description": str(fn.get("description") or ""),
                "parameters": fn.get("parameters") if isinstance(fn.get("parameters"), Mapping)
                else {},
            }
        )
    return entries


def first_parameter(tool_name: str, tools: Sequence[Mapping[str, Any]]) -> str | None:
    """The first parameter the named tool declares (ReAct passes its one input there)."""
    for tool in tool_entries(tools):
        if tool["name"] == tool_name:
            properties = tool["parameters"].get("properties")
            if isinstance(properties, Mapping) and properties:
                return str(next(iter(properties)))
            return None
    return None


def _react_input(tool_name: str, raw: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ReAct input as arguments: a JSON object is the arguments themselves (how a call with
    several arguments is written); anything else is the value of the tool's first parameter, as
    KAgentBench reads it (its official reader keeps even a JSON object as that text)."""
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if isinstance(value, dict) and value:
            return value
    key = first_parameter(tool_name, tools)
    return {key: raw} if key is not None and raw else {}


def _commands(command: Any) -> list[tuple[str, dict[str, Any]]]:
    """A JSON format's ``command``: one ``{name, args}`` object, or a list of them (parallel
    calls). Entries without a name are left out."""
    items = command if isinstance(command, list) else [command]
    return [(_or_none(_as_text(c["name"])), _dict_or_empty(c.get("args")))
            for c in items if isinstance(c, dict) and "name" in c]


def _command_json(step: ToolCallStep) -> Any:
    """The ``command`` of a JSON format: one object, or a list for parallel calls."""
    commands = [{"name": n, "args": dict(a)} for n, a in step.calls()]
    return commands[0] if len(commands) == 1 else commands


def _unfenced(text: str) -> tuple[str, tuple[str, ...]]:
    """A text-format answer without a code fence wrapped around it."""
    inner, fenced = strip_code_fence(text)
    return (inner, ("code_fence",)) if fenced else (text, ())


def _labelled(label: str, text: str) -> str:
    return f"{label}: {text}" if text else ""


# --------------------------------------------------------------------------- formats


class AgentFormat(ABC):
    """One output protocol: render steps, read answers, show earlier steps as memory."""

    name: ClassVar[str]
    kagentbench_key: ClassVar[str]
    summary: ClassVar[str]
    """One line saying what an answer in this format looks like (for Meta-Agent and judge)."""
    finish_tool: ClassVar[str | None] = None
    """The tool name that ends planning (``None`` where a plain answer does)."""
    step_limit: ClassVar[int | None] = None
    """The most planning steps the format allows (``None``: no limit of its own)."""
    two_stage: ClassVar[bool] = False
    """True when a separate concluder template writes the final answer (KuaiAgent)."""

    @abstractmethod
    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        """Read a model answer. ``tools`` (the tools offered) matter to ReAct only."""

    @abstractmethod
    def render(self, step: Step) -> str:
        """The completion a model should write for ``step``."""

    def render_observation(self, observation: str) -> str:
        return f"Observation: {observation}"

    def render_history(self, tasks: Sequence[CompletedTask], lang: str = "en") -> str:
        """Earlier steps as the format shows them back to the model (its scratchpad)."""
        blocks = []
        for task in tasks:
            call = ToolCallStep(task.thought, task.tool_name, task.tool_args)
            blocks.append(f"{self.render(call)}\n{self.render_observation(task.observation)}")
        return "\n".join(blocks)

    def conclusion(self, text: str | None) -> str:
        """The answer text KAgentBench scores for a concluding sample (the raw output here)."""
        return text or ""

    def _unsupported(self, step: Step) -> ValueError:
        return ValueError(f"format {self.name!r} cannot render a {type(step).__name__}")


class ReActFormat(AgentFormat):
    name = "react"
    kagentbench_key = "ReACT"
    summary = ("plain text: Thought / Action / Action Input lines (one input per action), "
               "Observation fed back, and Final Answer at the end")

    _FIRST_MARK = re.compile(r"Final Answer|Action")
    # Several Action / Action Input pairs in one step are parallel calls.
    _ACTIONS = re.compile(r"Action:(.+?)Action Input:(.*?)(?=\nAction:|Observation|\Z)",
                          re.DOTALL)
    _FINAL = re.compile(r"Final Answer:(.*)", re.DOTALL)

    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        text, repairs = _unfenced(text or "")
        mark = self._FIRST_MARK.search(text)
        thought = _or_none(text[: mark.start()] if mark else text)
        calls = [(_or_none(a.group(1)), _react_input(_or_none(a.group(1)), a.group(2).strip(),
                                                      tools))
                 for a in self._ACTIONS.finditer(text)]
        tool_name, args = calls[0] if calls else (NONE, {})
        final = self._FINAL.search(text)
        final_answer = final.group(1).strip() if final and tool_name == NONE else None
        return AgentStep(thought, tool_name, args, final_answer, repairs=repairs,
                         more_calls=tuple(calls[1:]))

    def render(self, step: Step) -> str:
        match step:
            case ToolCallStep(thought=thought):
                lines = [_labelled("Thought", thought)]
                for name, args in step.calls():
                    values = list(args.values())
                    # No argument: an empty input (KAgentBench reads "{}" as the first
                    # parameter's value); one: its raw text; more: one JSON text.
                    action_input = ("" if not values else _as_text(values[0])
                                    if len(values) == 1 else _json(dict(args)))
                    lines += [f"Action: {name}", f"Action Input: {action_input}"]
                return "\n".join(line for line in lines if line)
            case FinalAnswerStep(answer=answer, thought=thought):
                return "\n".join(x for x in [_labelled("Thought", thought),
                                             f"Final Answer: {answer}"] if x)
        raise self._unsupported(step)


class AutoGPTFormat(AgentFormat):
    name = "autogpt"
    kagentbench_key = "AutoGPT"
    summary = ('one JSON object {"thoughts": {"text", ...}, "command": {"name", "args"}}; '
               'the command "finish" with {"response"} gives the final answer')
    finish_tool = "finish"

    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        reading = read_json_object(text)
        data = reading.value or {}
        thoughts = data.get("thoughts")
        thought = NONE
        if isinstance(thoughts, dict) and "text" in thoughts:
            thought = _or_none(_as_text(thoughts["text"]))
        calls = _commands(data.get("command"))
        tool_name, args = calls[0] if calls else (NONE, {})
        final_answer = None
        if tool_name == self.finish_tool and isinstance(args.get("response"), str):
            final_answer = args["response"]
        return AgentStep(thought, tool_name, args, final_answer, repairs=tuple(reading.repairs),
                         more_calls=tuple(calls[1:]))

    def render(self, step: Step) -> str:
        match step:
            case ToolCallStep(thought=thought, details=details):
                thoughts = {"text": thought, **details}
                return _json({"thoughts": thoughts, "command": _command_json(step)}, indent=2)
            case FinalAnswerStep(answer=answer, thought=thought):
                command = {"name": self.finish_tool, "args": {"response": answer}}
                return _json({"thoughts": {"text": thought}, "command": command}, indent=2)
        raise self._unsupported(step)

    def render_history(self, tasks: Sequence[CompletedTask], lang: str = "en") -> str:
        lines = []
        for i, task in enumerate(tasks, 1):
            lines.append(f"{i}. {task.thought}\n   Command {task.tool_name} "
                         f"{_json(dict(task.tool_args))} returned: {task.observation}")
        return "\n".join(lines)

    def conclusion(self, text: str | None) -> str:
        # KAgentBench: an answer still calling web_search scores nothing; otherwise the text
        # after `response="` (up to any second one), with `")` removed.
        text = text or ""
        if "web_search(" in text:
            return ""
        if 'response="' in text:
            return text.split('response="')[1].replace('")', "")
        return text


class ToolLLaMAFormat(AgentFormat):
    name = "toolllama"
    kagentbench_key = "ToolLlama"
    summary = ("Thought / Action / Action Input lines with JSON arguments; the action Finish "
               "gives the answer (give_answer) or restarts (give_up_and_restart)")
    finish_tool = "Finish"

    _THOUGHT = re.compile(r"Thought:(.+?)(?=Action|\Z)", re.DOTALL)
    # Several Action / Action Input pairs in one step are parallel calls.
    _ACTIONS = re.compile(r"Action:(.+?)(?:Action Input:(.*?))?(?=\nAction:|Thought|\Z)",
                          re.DOTALL)

    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        text, repairs = _unfenced(text or "")
        thought_m = self._THOUGHT.search(text)
        thought = _or_none(thought_m.group(1) if thought_m else "")
        calls = []
        for action in self._ACTIONS.finditer(text):
            args = {}
            if action.group(2) is not None:
                reading = read_json_object(action.group(2).strip())
                args = _dict_or_empty(reading.value)
                repairs += tuple(reading.repairs)
            calls.append((_or_none(action.group(1)), args))
        tool_name, args = calls[0] if calls else (NONE, {})
        final_answer, gave_up = None, False
        if tool_name == self.finish_tool:
            kind = args.get("return_type")
            if kind == "give_answer":
                final_answer = _as_text(args.get("final_answer", ""))
            gave_up = kind == "give_up_and_restart"
        return AgentStep(thought, tool_name, args, final_answer, gave_up, repairs,
                         more_calls=tuple(calls[1:]))

    def render(self, step: Step) -> str:
        match step:
            case ToolCallStep(thought=thought):
                actions = [f"Action: {n}\nAction Input: {_json(dict(a))}" for n, a in step.calls()]
                return f"Thought: {thought}\n" + "\n".join(actions)
            case FinalAnswerStep(answer=answer, thought=thought):
                name = self.finish_tool
                body = _json({"return_type": "give_answer", "final_answer": answer})
            case GiveUpStep(thought=thought):
                name = self.finish_tool
                body = _json({"return_type": "give_up_and_restart"})
            case _:
                raise self._unsupported(step)
        return f"Thought: {thought}\nAction: {name}\nAction Input: {body}"

    def conclusion(self, text: str | None) -> str:
        # KAgentBench: the text after `"final_answer": "` with quotes and braces removed.
        text = text or ""
        marker = '"final_answer": "'
        if marker in text:
            text = text.split(marker)[1].replace('"', "").replace("}", "")
        return "" if text == "\n" else text


class ModelScopeFormat(AgentFormat):
    name = "modelscope"
    kagentbench_key = "ModelScope"
    summary = ('free text; a call is {"api_name", "parameters"} JSON between <|startofthink|> '
               "and <|endofthink|>; a reply without a call is the answer")

    START, END = "<|startofthink|>", "<|endofthink|>"
    EXEC_START, EXEC_END = "<|startofexec|>", "<|endofexec|>"
    _FENCE = re.compile(r"^\s*```[ \t]*(?:json|JSON)?[ \t]*\n?|\n?```\s*$")

    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        text = text or ""
        start = text.find(self.START)
        if start < 0:
            answer = text.strip()
            return AgentStep(final_answer=answer or None)
        repairs: tuple[str, ...] = ()
        calls = []
        while start >= 0:  # one think block per call; several are parallel calls
            body_start = start + len(self.START)
            end = text.find(self.END, body_start)
            if end < 0:
                end, repairs = len(text), (*repairs, "missing_endofthink")
            # The ```JSON fence inside the think block is part of the format, not a fault.
            reading = read_json_object(self._FENCE.sub("", text[body_start:end]).strip())
            data = reading.value or {}
            repairs += tuple(reading.repairs)
            calls.append((_or_none(_as_text(data["api_name"])) if "api_name" in data else NONE,
                          _dict_or_empty(data.get("parameters"))))
            start = text.find(self.START, end)
        tool_name, args = calls[0]
        # KAgentBench never reads a ModelScope thought: it stays "None".
        return AgentStep(NONE, tool_name, args, repairs=repairs, more_calls=tuple(calls[1:]))

    def render(self, step: Step) -> str:
        match step:
            case ToolCallStep(thought=thought):
                # Indented: KAgentBench's reader cuts the JSON at its last "}\n}", so a
                # one-line call would not be found there.
                blocks = [f"{self.START}```JSON\n"
                          f"{_json({'api_name': n, 'parameters': dict(a)}, indent=2)}\n```{self.END}"
                          for n, a in step.calls()]
                lead = f"{thought}\n" if thought else ""
                return lead + "\n".join(blocks)
            case FinalAnswerStep(answer=answer):
                return answer
        raise self._unsupported(step)

    def render_observation(self, observation: str) -> str:
        return f"{self.EXEC_START}{observation}{self.EXEC_END}"


class KuaiAgentFormat(AgentFormat):
    name = "kuaiagent"
    kagentbench_key = "KuaiAgent"
    summary = ('one JSON task {"task_name", "command": {"name", "args"}} per step; '
               '"task_complete" when the goal can be answered, at most five steps')
    finish_tool = "task_complete"
    step_limit = 5
    two_stage = True

    _LABELS: ClassVar[dict[str, tuple[str, str, str]]] = {
        "zh": ("任务", "命令", "结果"), "en": ("Task", "Command", "Result")}

    def parse(self, text: str | None, tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
        reading = read_json_object(text)
        data = reading.value or {}
        thought = _or_none(_as_text(data["task_name"])) if "task_name" in data else NONE
        calls = _commands(data.get("command"))
        tool_name, args = calls[0] if calls else (NONE, {})
        return AgentStep(thought, tool_name, args, repairs=tuple(reading.repairs),
                         more_calls=tuple(calls[1:]))

    def parse_conclusion(self, text: str | None) -> AgentStep:
        """A concluder answer: all of it is the final answer."""
        answer = (text or "").strip()
        return AgentStep(final_answer=answer or None)

    def render(self, step: Step) -> str:
        match step:
            case ToolCallStep(thought=thought):
                return _json({"task_name": thought, "command": _command_json(step)}, indent=4)
            case FinalAnswerStep(answer=answer):
                return answer
        raise self._unsupported(step)

    def finish(self, thought: str) -> ToolCallStep:
        """The planner's last step: nothing more to do, hand over to the concluder."""
        return ToolCallStep(thought, self.finish_tool or "task_complete", {})

    def render_history(self, tasks: Sequence[CompletedTask], lang: str = "en") -> str:
        task, command, result = self._LABELS.get(lang, self._LABELS["en"])
        blocks = []
        for i, t in enumerate(tasks, 1):
            blocks.append(f"{task} {i}: {t.thought}\n{command}: {t.tool_name} "
                          f"{_json(dict(t.tool_args))}\n{result}: {t.observation}")
        return "\n\n".join(blocks)


# --------------------------------------------------------------------------- registries

FORMATS: dict[str, AgentFormat] = {
    f.name: f
    for f in (ReActFormat(), AutoGPTFormat(), ToolLLaMAFormat(), ModelScopeFormat(),
              KuaiAgentFormat())
}
"""Every supported format by protocol name."""

KAGENTBENCH_KEYS: dict[str, str] = {f.kagentbench_key: f.name for f in FORMATS.values()}
"""KAgentBench's template keys (``ReACT``, ``AutoGPT`` ...) -> protocol name."""


def agent_format(protocol: str) -> AgentFormat:
    """The format with this protocol name, or this KAgentBench template key."""
    if protocol in FORMATS:
        return FORMATS[protocol]
    if protocol in KAGENTBENCH_KEYS:
        return FORMATS[KAGENTBENCH_KEYS[protocol]]
    known = ", ".join([*FORMATS, *KAGENTBENCH_KEYS])
    raise KeyError(f"unknown agent output format {protocol!r} (known: {known})")


def parse_answer(protocol: str, text: str | None,
                 tools: Sequence[Mapping[str, Any]] = ()) -> AgentStep:
    """Read a planning answer written in ``protocol`` (a name or a KAgentBench key)."""
    return agent_format(protocol).parse(text, tools)


def render_step(protocol: str, step: Step) -> str:
    """The completion for one step in ``protocol``'s own text format."""
    return agent_format(protocol).render(step)
