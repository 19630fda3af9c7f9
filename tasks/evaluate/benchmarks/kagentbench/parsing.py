"""Reading a planning answer into (thought, tool_name, tool_args) for KAgentBench scoring.

Two parsers:

- ``official``: exactly what KAgentBench's evaluator extracts, malformed answers included, so the
  scores equal the official script's. Its JSON handling is narrow: it takes the text from the
  first ``{`` to the last ``}\\n}`` (so pretty-printed nested JSON is found inside prose or code
  fences, while compact one-line JSON is found only when it is the whole answer), appends
  ``\\n}`` while ``{`` outnumber ``}``, and then tries, once each, three repairs keyed on
  ``json``'s error message: drop the backslash of an invalid escape, quote every ``word:`` (a
  regular expression over the whole text, strings included), balance braces at the end.
  Other quirks reproduced: a ReAct answer starting with ``Action:`` has the text up to
  ``Action Input`` as its thought; an empty ReAct thought stays ``""``; a ToolLLaMA answer without
  ``Thought:`` has the thought ``"[]"`` (the script keeps the empty regex result, which scores as
  its string form); the ReAct argument name is the first parameter of the *last* tool of that
  name in ``funcs``; a ModelScope thought is never read.
- ``agentune``: the project's own parsers (:mod:`agentune.tasks.agent.formats`), which also find
  JSON in code fences, after prose and before trailing text, and read ModelScope calls whose
  ``<|endofthink|>`` was cut off. Scores are then higher on malformed answers than the official
  script's, and equal on well-formed ones.

Which parser reads a template follows its KAgentBench key (``ReACT``, ``AutoGPT``, ``ToolLlama``,
``ModelScope``, ``KuaiAgent``) or, for the extra templates of agentune's own held-out benchmark,
the protocol the sample declares for that key.

The rule for thoughts: a value is kept as the answer wrote it (any JSON type); the scorer turns it
into text with ``str()``, as the official script does. Where the official script raises on an
answer (e.g. ``"thoughts"`` a string containing ``text``), it is read as giving no thought / tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentune.tasks.agent.formats import KAGENTBENCH_KEYS, agent_format

NONE = "None"
ParserName = Literal["official", "agentune"]
OFFICIAL_KEYS: dict[str, str] = dict(KAGENTBENCH_KEYS)
"""KAgentBench template key -> protocol name (``ReACT`` -> ``react`` ...)."""


@dataclass(frozen=True)
class PlanReading:
    """What the scorer compares with the goldens."""

    thought: Any = NONE
    tool_name: Any = NONE
    tool_args: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- official JSON


def _json_slice(text: str) -> str:
    """The official script's JSON locator: close unbalanced braces with ``\\n}``, then cut from
    the first ``{`` to the last ``}\\n}`` (the whole text when either is missing, or when five or
    more braces had to be added)."""
    missing = text.count("{") - text.count("}")
    if missing > 0:
        text = text.rstrip("\n") + "\n}" * missing
    if missing >= 5:
        return text
    start = text.find("{")
    end = text.rfind("}\n}")
    if start < 0 or end < 0:
        return text
    return text[start : end + 3].strip()


def _error(text: str) -> str | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    return None


_CHAR_POSITION = re.compile(r"\(char (\d+)\)")
_BARE_KEY = re.compile(r"(\w+):")


def _drop_bad_escapes(text: str, message: str) -> str:
    """Remove the backslash ``json`` complains about, again while it complains about one."""
    while message.startswith("Invalid \\escape"):
        position = int(_CHAR_POSITION.search(message)[1])  # type: ignore[index]
        text = text[:position] + text[position + 1 :]
        message = _error(text) or ""
        if not message:
            return text
    return text


def _balanced(text: str) -> str | None:
    """Braces appended (or every trailing ``}`` stripped) to even the counts; None unless the
    result is valid JSON."""
    opened, closed = text.count("{"), text.count("}")
    if opened > closed:
        text += "}" * (opened - closed)
    elif closed > opened:
        text = text.rstrip("}")
    return text if _error(text) is None else None


class _Unrepairable(ValueError):
    """Quoting bare keys did not make valid JSON: the official script gives up on the answer."""


def _repaired(text: str) -> str:
    message = _error(text)
    if message is None:
        return text
    if message.startswith("Invalid \\escape"):
        text = _drop_bad_escapes(text, message)
    if message.startswith("Expecting property name enclosed in double quotes"):
        quoted = _BARE_KEY.sub(r'"\1":', text)
        if _error(quoted) is not None:
            raise _Unrepairable(quoted)
        return quoted
    return _balanced(text) or text


def official_json(text: str) -> dict[str, Any] | None:
    """The object the official script reads from an answer, or None where it finds none."""
    try:
        value = json.loads(_repaired(_json_slice(text)))
    except (json.JSONDecodeError, _Unrepairable, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------- official templates


def _none_if_empty(tool_name: Any) -> Any:
    return NONE if tool_name == "" else tool_name


def _react_key(tool_name: str, funcs: Sequence[Mapping[str, Any]]) -> str:
    """First parameter name of the last ``funcs`` entry named ``tool_name`` (``"None"`` if none)."""
    key = NONE
    for func in funcs:
        if func.get("name") == tool_name:
            try:
                key = str(next(iter(func["parameters"]["properties"].keys())))
            except (KeyError, TypeError, AttributeError, StopIteration):
                key = NONE
    return key


_REACT_THOUGHT = re.compile(r"(.+?)(?=Final Answer|\Z|Action)", re.DOTALL)
_REACT_ACTION = re.compile(r"Action:(.+?)Action Input:", re.DOTALL)
_REACT_INPUT = re.compile(r"Action Input:(.+?)(?=Observation|\Z)", re.DOTALL)


def official_react(text: str, funcs: Sequence[Mapping[str, Any]]) -> PlanReading:
    match = _REACT_THOUGHT.search(text)
    thought = match.group(1).strip() if match else ""
    tool_name: Any = NONE
    args: dict[str, Any] = {}
    action = _REACT_ACTION.search(text)
    if action:
        tool_name = action.group(1).strip()
        key = _react_key(tool_name, funcs)
        if key != NONE:
            value = _REACT_INPUT.search(text)
            if value:
                args = {key: value.group(1).strip()}
    return PlanReading(thought, _none_if_empty(tool_name), args)


def _command(data: Mapping[str, Any], thought: Any) -> PlanReading:
    tool_name: Any = NONE
    args: dict[str, Any] = {}
    command = data.get("command")
    if isinstance(command, dict) and command:
        if "name" in command:
            tool_name = command["name"]
        if isinstance(command.get("args"), dict):
            args = command["args"]
    return PlanReading(thought, _none_if_empty(tool_name), args)


def official_autogpt(text: str) -> PlanReading:
    data = official_json(text)
    if data is None:
        return PlanReading()
    thought: Any = NONE
    thoughts = data.get("thoughts")
    if isinstance(thoughts, dict) and "text" in thoughts:
        thought = thoughts["text"]
    return _command(data, thought)


def official_kuaiagent(text: str) -> PlanReading:
    data = official_json(text)
    if data is None:
        return PlanReading()
    return _command(data, data.get("task_name", NONE))


_TOOLLLAMA_THOUGHT = re.compile(r"Thought:(.+?)(?=\Z|Action)", re.DOTALL)
_TOOLLLAMA_ACTION = re.compile(r"Action:(.+?)(?=Action Input:|\Z)", re.DOTALL)
_TOOLLLAMA_INPUT = re.compile(r"Action Input:(.+?)(?=Thought|\Z)", re.DOTALL)
_NO_MATCH = "[]"
"""The ToolLLaMA thought of an answer without ``Thought:``: the official script keeps the empty
list its regular expression returned, which scores as the text ``[]``."""


def official_toolllama(text: str) -> PlanReading:
    match = _TOOLLLAMA_THOUGHT.search(text)
    thought = match.group(1).strip() if match else _NO_MATCH
    tool_name: Any = NONE
    args: dict[str, Any] = {}
    action = _TOOLLLAMA_ACTION.search(text)
    if action:
        tool_name = action.group(1).strip()
        value = _TOOLLLAMA_INPUT.search(text)
        if value:
            args = official_json(value.group(1).strip()) or {}
    return PlanReading(thought, _none_if_empty(tool_name), args)


_THINK = re.compile(r"<\|startofthink\|>(.+?)<\|endofthink\|>", re.DOTALL)


def official_modelscope(text: str) -> PlanReading:
    match = _THINK.search(text)
    if not match:
        return PlanReading()
    data = official_json(match.group(1).strip())
    if not data:
        return PlanReading()
    tool_name = data.get("api_name", NONE)
    args = data["parameters"] if isinstance(data.get("parameters"), dict) else {}
    return PlanReading(NONE, _none_if_empty(tool_name), args)


def read_plan(protocol: str, text: str, funcs: Sequence[Mapping[str, Any]],
              parser: ParserName = "official") -> PlanReading:
    """(thought, tool_name, tool_args) of a planning answer in ``protocol`` (``react``,
    ``autogpt``, ``toolllama``, ``modelscope``, ``kuaiagent``)."""
    if parser == "agentune":
        thought, tool_name, args = agent_format(protocol).parse(text, funcs).kagentbench()
        return PlanReading(thought, tool_name, args)
    if protocol == "react":
        return official_react(text, funcs) if text else PlanReading()
    if protocol == "autogpt":
        return official_autogpt(text)
    if protocol == "toolllama":
        return official_toolllama(text)
    if protocol == "modelscope":
        return official_modelscope(text)
    if protocol == "kuaiagent":
        return official_kuaiagent(text)
    raise KeyError(f"unknown agent output format {protocol!r}")


# --------------------------------------------------------------------------- concluding answers


def _autogpt_conclusion(text: str) -> str:
    if "web_search(" in text:
        return ""
    if 'response="' in text:
        return text.split('response="')[1].replace('")', "")
    return text


def _toolllama_conclusion(text: str) -> str:
    marker = '"final_answer": "'
    if marker in text:
        text = text.split(marker)[1].replace('"', "").replace("}", "")
    return "" if text == "\n" else text


def conclusion_text(protocol: str | None, text: str, parser: ParserName = "official") -> str:
    """The text scored for a concluding answer: AutoGPT keeps what follows ``response="`` (and an
    answer still calling ``web_search(`` scores nothing); ToolLLaMA keeps what follows
    ``"final_answer": "`` with quotes and braces removed; other templates the raw answer.

    With the ``agentune`` parser an answer its format reads as a final answer (AutoGPT's
    ``finish`` command, ToolLLaMA's ``give_answer``, ReAct's ``Final Answer:``) is scored by that
    answer text; anything else as with the official parser.
    """
    if parser == "agentune" and protocol is not None and text:
        answer = agent_format(protocol).parse(text, ()).final_answer
        if answer is not None:
            return answer
    if protocol == "autogpt":
        return _autogpt_conclusion(text)
    if protocol == "toolllama":
        return _toolllama_conclusion(text)
    return text
