"""The scripted teacher of the synthesis throughput benchmark. It runs in the test server's
child process, which imports it by name: so it lives here, not in the benchmark module."""

from __future__ import annotations

import json
import re
from typing import Any

from support.openai_server import Action, Reply

QUERY = re.compile(r"What is (\d+) times (\d+)\?")


class CalculatorTeacher:
    """The scripted teacher (runs in the server process, so defined at module level): for "What
    is A times B?" it calls the calculator with ``A*B`` until the prompt's memory shows that
    call, then finishes in the template's format; the concluder gets the answer."""

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        first = body["messages"][0]["content"]
        match = QUERY.search(first)
        if match is None:
            return Reply(f"no query in request {n}")  # makes the trajectory fail: counted below
        a, b = match.groups()
        expression, answer = f"{a}*{b}", f"{a} times {b} is {int(a) * int(b)}."
        if "Write a helpful answer for the user:" in first:
            return Reply(answer)
        done = expression in first[match.end():]
        if "task_complete" in first:  # KuaiAgent
            name, args = ("task_complete", {}) if done else ("calculator",
                                                              {"expression": expression})
            return Reply(json.dumps({"task_name": f"use {name}",
                                     "command": {"name": name, "args": args}}))
        if '"thoughts"' in first:  # AutoGPT
            name, args = ("finish", {"response": answer}) if done else (
                "calculator", {"expression": expression})
            return Reply(json.dumps({"thoughts": {"text": f"use {name}"},
                                     "command": {"name": name, "args": args}}))
        if done:  # ReAct
            return Reply(f"Thought: I now know the final answer\nFinal Answer: {answer}")
        return Reply(f"Thought: use calculator\nAction: calculator\n"
                     f"Action Input: {json.dumps({'expression': expression})}")
