"""A trajectory read as the actions the verifier judges: calls, questions to the user, an answer.

Two inputs give the same :class:`Rollout`:

- OpenAI ``messages``: an assistant turn with ``tool_calls`` is one call action (several calls
  when they were made in parallel; a call of ``ask_user`` is a question); an assistant turn
  without calls is a question when the user speaks after it, else the final answer;
- a template's ``steps`` (prompt/completion pairs in its own text format), each completion read by
  that template's parser.

What cannot be read (arguments that are not JSON, a completion the parser does not understand)
stays in the rollout as an action with a ``problem``: it is a format error, not a reason to stop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentune.tasks.agent.formats import agent_format
from agentune.tasks.environments.scenarios import Call
from agentune.tasks.tools.catalog import ToolSpec

ASK_USER = "ask_user"
"""The tool name of a question to the user (its ``question`` argument is the text)."""


def ask_user_tool() -> ToolSpec:
    """The ``ask_user`` action, offered as a tool: an agent asks for what a request lacks."""
    return ToolSpec(ASK_USER, "Ask the user for information the request lacks, before acting. "
                    "向用户询问请求中缺少的信息。", {
                        "type": "object",
                        "properties": {"question": {"type": "string",
                                                    "description": "The question for the user."}},
                        "required": ["question"]})

ActionKind = Literal["call", "ask", "answer"]


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    calls: tuple[Call, ...] = ()
    text: str = ""
    problem: str | None = None
    """Why this step is a format error (unreadable, unknown format), or None."""


@dataclass(frozen=True)
class Rollout:
    actions: tuple[Action, ...] = ()
    truncated: bool = False
    """It stopped at a cap (steps, turns, length) before it gave an answer."""
    observations: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    """The results the trajectory recorded per call action (for the detail only)."""

    def calls(self) -> list[Call]:
        return [c for a in self.actions if a.kind == "call" for c in a.calls]

    def call_steps(self) -> int:
        return sum(1 for a in self.actions if a.kind == "call")

    def final_answer(self) -> str | None:
        if self.actions and self.actions[-1].kind == "answer":
            return self.actions[-1].text
        return None

    def ended_asking(self) -> bool:
        return bool(self.actions) and self.actions[-1].kind == "ask"


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if isinstance(raw, Mapping):
        return dict(raw), None
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"arguments are not JSON: {exc.msg}"
        if isinstance(value, dict):
            return value, None
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    if raw is None:
        return {}, None
    return None, f"arguments must be a JSON object, got {type(raw).__name__}"


def _call_action(tool_calls: Sequence[Any]) -> Action:
    calls: list[Call] = []
    problems: list[str] = []
    for item in tool_calls:
        fn = item.get("function", item) if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            problems.append("a tool call without a function name")
            continue
        args, problem = _arguments(fn.get("arguments"))
        if problem:
            problems.append(f"{fn['name']}: {problem}")
            continue
        calls.append(Call(name=fn["name"], arguments=args or {}))
    asks = [c for c in calls if c.name == ASK_USER]
    if asks and len(asks) == len(calls):
        return Action("ask", text=" ".join(str(c.arguments.get("question", "")) for c in asks),
                      problem="; ".join(problems) or None)
    return Action("call", calls=tuple(c for c in calls if c.name != ASK_USER),
                  problem="; ".join(problems) or None)


def from_messages(messages: Sequence[Mapping[str, Any]], *, truncated: bool = False) -> Rollout:
    """The actions of an OpenAI conversation (system and first user turn are the prompt)."""
    actions: list[Action] = []
    observations: list[tuple[str, ...]] = []
    pending: list[str] = []
    turns = list(messages)
    for i, message in enumerate(turns):
        role = message.get("role")
        if role == "tool":
            pending.append(str(message.get("content", "")))
            continue
        if pending:
            observations.append(tuple(pending))
            pending = []
        if role != "assistant":
            continue
        tool_calls = message.get("tool_calls") or []
        if tool_calls:
            actions.append(_call_action(tool_calls))
            continue
        text = str(message.get("content") or "")
        user_follows = any(m.get("role") == "user" for m in turns[i + 1:])
        actions.append(Action("ask" if user_follows else "answer", text=text))
    if pending:
        observations.append(tuple(pending))
    return Rollout(tuple(actions), truncated=truncated, observations=tuple(observations))


def from_steps(steps: Sequence[Mapping[str, Any]], protocol: str, *,
               tools: Sequence[Mapping[str, Any]] = (), truncated: bool = False) -> Rollout:
    """The actions of a template trajectory: each completion read by ``protocol``'s parser."""
    fmt = agent_format(protocol)
    actions: list[Action] = []
    for step in steps:
        completion = str(step.get("completion", ""))
        if step.get("kind") == "conclude":
            actions.append(Action("answer", text=fmt.conclusion(completion)))
            continue
        read = fmt.parse(completion, tools)
        if read.calls_tool and read.tool_name == fmt.finish_tool:
            if read.final_answer is not None or read.gave_up:
                actions.append(Action("answer", text=read.final_answer or ""))
            # else KuaiAgent's task_complete: the concluder's step that follows is the answer
        elif read.calls_tool and read.tool_name == ASK_USER:
            actions.append(Action("ask", text=str(read.tool_args.get("question", ""))))
        elif read.calls_tool:
            actions.append(Action("call", calls=tuple(Call(name=name, arguments=dict(args))
                                                      for name, args in read.calls)))
        elif read.final_answer is not None:
            actions.append(Action("answer", text=read.final_answer))
        else:
            actions.append(Action("call", problem=f"{protocol}: the completion is neither a "
                                  "call nor an answer"))
    return Rollout(tuple(actions), truncated=truncated)
