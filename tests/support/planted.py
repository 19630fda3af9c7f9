"""Planted trajectories for the verifier: rule-made variations of the demo scenarios' ground truth,
each labelled with whether a correct verifier passes it.

Every scenario gives the right trajectory (its ground truth, then an answer stating its facts) and
the variations that apply to it: independent calls in another order (pass), a wrong argument
(fail), a redundant repeated call (fail), a missing step (fail, even though its answer claims the
facts), a call where none was needed (fail), an answer that misses a fact (fail), an unknown tool
or invalid arguments (fail), and for missing-information scenarios: a question and stop (pass), a
question, the user's answer, then the right calls (pass), and acting without asking (fail).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

from agentune.tasks.environments.scenarios import Call, Scenario


@dataclass(frozen=True)
class Planted:
    scenario: Scenario
    variant: str
    messages: list[dict[str, Any]]
    passes: bool

    @property
    def id(self) -> str:
        return f"{self.scenario.id}/{self.variant}"


def ideal_answer(scenario: Scenario, facts: list[str]) -> str:
    said = "; ".join(f.split("|")[0] for f in facts)
    return (f"已完成。结果：{said}。" if scenario.lang == "zh" else f"Done. Result: {said}.") \
        if facts else ("我直接回答：好的。" if scenario.lang == "zh" else "Here is my answer.")


def conversation(scenario: Scenario, steps: list[list[Call]], answer: str | None, *,
                 ask: str | None = None, user_reply: str | None = None) -> list[dict[str, Any]]:
    """OpenAI messages: the request, optionally a question and the user's reply, one assistant
    turn per step (parallel calls in one turn), tool results, then the answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": scenario.request}]
    if ask is not None and user_reply is None:
        # A trajectory that stops at its question asks through the ask_user action.
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_ask", "type": "function", "function": {
                "name": "ask_user", "arguments": json.dumps({"question": ask})}}]})
        return messages
    if ask is not None:
        messages += [{"role": "assistant", "content": ask}, {"role": "user", "content": user_reply}]
    n = 0
    for step in steps:
        calls = []
        for call in step:
            n += 1
            calls.append({"id": f"call_{n}", "type": "function", "function": {
                "name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}})
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "{}"} for c in calls]
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    return messages


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _wrong(value: Any) -> Any:
    if isinstance(value, str) and _DATE.match(value):
        return (dt.date.fromisoformat(value) + dt.timedelta(days=3)).isoformat()
    if isinstance(value, str):
        return value + "-X"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, list):
        return value[:-1] if value else ["someone else"]
    return value


def with_wrong_argument(steps: list[list[Call]]) -> list[list[Call]] | None:
    """The last call's first string argument (else first argument) changed."""
    last = steps[-1][-1]
    if not last.arguments:
        return None
    names = sorted(last.arguments, key=lambda k: not isinstance(last.arguments[k], str))
    arguments = dict(last.arguments, **{names[0]: _wrong(last.arguments[names[0]])})
    return [*steps[:-1], [*steps[-1][:-1], Call(name=last.name, arguments=arguments)]]


def plant(scenario: Scenario, offered_tools: list[str]) -> list[Planted]:
    """Every variation that applies to ``scenario``, with its label."""
    gt = [list(step) for step in scenario.ground_truth]
    facts = list(scenario.facts)
    out = [Planted(scenario, "right", conversation(scenario, gt, ideal_answer(scenario, facts)), True)]

    def add(variant: str, messages: list[dict[str, Any]], passes: bool) -> None:
        out.append(Planted(scenario, variant, messages, passes))

    if scenario.kind in ("no_tool", "irrelevant"):
        extra = [[Call(name=offered_tools[0], arguments={})]]
        add("unneeded_call", conversation(scenario, extra, ideal_answer(scenario, facts)), False)
        return out
    if any(len(step) > 1 for step in gt):
        add("reordered", conversation(scenario, [list(reversed(s)) for s in gt],
                                      ideal_answer(scenario, facts)), True)
        add("parallel_as_sequence", conversation(
            scenario, [[c] for step in gt for c in reversed(step)], ideal_answer(scenario, facts)), True)
    wrong = with_wrong_argument(gt)
    if wrong is not None:
        add("wrong_argument", conversation(scenario, wrong, ideal_answer(scenario, facts)), False)
    add("redundant_call", conversation(scenario, [*gt, [gt[0][0]]], ideal_answer(scenario, facts)),
        False)
    add("missing_step", conversation(scenario, gt[:-1], ideal_answer(scenario, facts)), False)
    if facts:
        add("missing_fact", conversation(scenario, gt, ideal_answer(scenario, facts[:-1])), False)
    add("unknown_tool", conversation(scenario, [*gt[:-1], [Call(name="no_such_tool")]],
                                     ideal_answer(scenario, facts)), False)
    add("no_answer", conversation(scenario, gt, None), False)
    if scenario.kind == "missing_info":
        question = "请问具体信息是什么？" if scenario.lang == "zh" else "Could you give me the details?"
        add("ask_and_stop", conversation(scenario, [], None, ask=question), True)
        add("ask_then_act", conversation(scenario, gt, ideal_answer(scenario, facts), ask=question,
                                         user_reply=scenario.hidden), True)
        # The right calls, guessed without asking: the request did not say enough.
        out[0] = Planted(scenario, "act_without_asking", out[0].messages, False)
    else:
        question = "请问具体信息是什么？" if scenario.lang == "zh" else "Could you give me the details?"
        add("asks_needlessly", conversation(scenario, [], None, ask=question), False)
    return out
