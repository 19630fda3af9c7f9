"""BFCL helpers for tests: the bfcl-eval venv (skip, saying what to run, when it is missing), its
ground truth written as a model would answer it, and scripted endpoints answering BFCL prompts
(prompt mode) for :class:`support.openai_server.OpenAITestServer`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentune.tasks.evaluate.benchmarks.bfcl.worker import BfclUnavailable, bfcl_python

from support.openai_server import Reply

FEEDBACK_PREFIX = "[{'role': 'tool'"
"""How BFCL's prompting handlers start the user message that carries execution results."""


def require_bfcl() -> Path:
    try:
        return bfcl_python()
    except BfclUnavailable as exc:
        pytest.skip(str(exc))


def _data_dir(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import bfcl_eval, os; "
                          "print(os.path.dirname(bfcl_eval.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()) / "data"


def ground_truth(python: Path, categories: Sequence[str]) -> dict[str, Any]:
    """id -> BFCL's possible answer (categories without one, the irrelevance ones, are absent)."""
    out: dict[str, Any] = {}
    for category in categories:
        path = _data_dir(python) / "possible_answer" / f"BFCL_v4_{category}.json"
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                item = json.loads(line)
                out[item["id"]] = item["ground_truth"]
    return out


def _pick(options: list[Any]) -> Any:
    return _value(next(o for o in options if o != ""))


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _pick(v) for k, v in value.items() if "" not in v}
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


def picked_calls(truth: Sequence[Mapping[str, Mapping[str, list[Any]]]]
                 ) -> list[tuple[str, dict[str, Any]]]:
    """An AST ground truth as calls: each argument its first acceptable value (an omittable one
    left out)."""
    return [(name, {k: _pick(v) for k, v in args.items() if "" not in v})
            for call in truth for name, args in call.items()]


def call_text(truth: Sequence[Mapping[str, Mapping[str, list[Any]]]]) -> str:
    """An AST ground truth as a prompt-mode answer: ``[f(a=1), g(b='x')]``."""
    return "[" + ", ".join(f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
                           for name, args in picked_calls(truth)) + "]"


def _opening(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages up to the first user message: which entry a request belongs to."""
    out = []
    for m in messages:
        out.append(f"{m['role']}:{m.get('content')}")
        if m["role"] == "user":
            break
    return "\n".join(out)


def ground_truth_script(entries: Sequence[Mapping[str, Any]], truth: Mapping[str, Any]
                        ) -> Callable[[dict[str, Any], int], Reply]:
    """An endpoint answering every entry with its ground truth: single-turn, the calls (nothing
    for irrelevance); multi-turn, each turn's calls in one step, then nothing (the turn ends)."""
    by_opening = {_opening(e["turns"][0]): e for e in entries}

    def script(body: dict[str, Any], n: int) -> Reply:
        messages = body["messages"]
        entry = by_opening[_opening(messages)]
        answer = truth.get(entry["id"])
        if answer is None:
            return Reply("")
        if not entry["multi_turn"]:
            return Reply(call_text(answer))
        if messages[-1]["role"] != "user" or messages[-1]["content"].startswith(FEEDBACK_PREFIX):
            return Reply("")
        turn = sum(m["role"] == "user" and not m["content"].startswith(FEEDBACK_PREFIX)
                   for m in messages) - 1
        return Reply("[" + ", ".join(answer[turn]) + "]")

    return script


def tool_call_script(entries: Sequence[Mapping[str, Any]], truth: Mapping[str, Any]
                     ) -> Callable[[dict[str, Any], int], Reply]:
    """fc mode, single-turn entries: the ground truth as tool calls (``.`` in a name as ``_``,
    as BFCL's tool conversion names them), a text answer where there is none."""
    by_opening = {_opening(e["turns"][0]): e for e in entries}

    def script(body: dict[str, Any], n: int) -> Reply:
        entry = by_opening[_opening(body["messages"])]
        assert body.get("tools"), "fc mode passes the functions as tools"
        answer = truth.get(entry["id"])
        if answer is None:
            return Reply("None of these functions applies.")
        return Reply(None, [{"name": name.replace(".", "_"), "arguments": args}
                            for name, args in picked_calls(answer)])

    return script


def silent_script(body: dict[str, Any], n: int) -> Reply:
    """An endpoint that never calls a function."""
    return Reply("I cannot help with that.")
