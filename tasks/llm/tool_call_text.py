"""Reading tool calls out of a model's free text (the local provider's chat-template mode).

Two forms are read, in this order of preference:

- Hermes blocks, as the Qwen2.5 chat template asks for and vLLM's hermes parser reads them:
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, one or more;
- when the text has no such block, fenced JSON blocks holding a call, as Qwen2.5-Coder writes
  when it answers freely: ````` ```json {"name": ..., "arguments": ...} ``` `````
  (``parameters`` is read as ``arguments``; a block may hold a list of calls).

A block's JSON is repaired with json-repair when it is almost JSON (a missing brace, a trailing
comma), and read only when the result is a call: a block that is not stays in the content, for
the caller to see. A fenced block must carry ``arguments`` (or ``parameters``) to count: a fenced
``{"name": "Ada"}`` is an answer, not a call.
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

Call = tuple[str, str]
"""A tool's name and its arguments as a JSON string."""

_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED_BLOCK = re.compile(r"```[ \t]*(?:json|tool_call)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_ARGUMENT_KEYS = ("arguments", "parameters")


def read_tool_calls(text: str) -> tuple[str | None, list[Call]]:
    """The content around the calls and every readable call; ``(text, [])`` when none is read.

    With Hermes blocks the content is the text before the first block (plus unread blocks);
    with fenced blocks it is the text with the read blocks taken out.
    """
    hermes = list(_HERMES_BLOCK.finditer(text))
    if hermes:
        calls: list[Call] = []
        unread: list[str] = []
        for match in hermes:
            found = _calls_in(match.group(1), need_arguments=False)
            if found:
                calls += found
            else:
                unread.append(match.group(0))
        head = text.split("<tool_call>", 1)[0].strip()
        content = "\n".join(part for part in [head, *unread] if part)
        return ((content or None) if calls else text), calls
    calls, kept, start = [], [], 0
    for match in _FENCED_BLOCK.finditer(text):
        found = _calls_in(match.group(1), need_arguments=True)
        if found:
            calls += found
            kept.append(text[start:match.start()])
            start = match.end()
    if not calls:
        return text, []
    kept.append(text[start:])
    content = "\n".join(part.strip() for part in kept if part.strip())
    return content or None, calls


def _calls_in(body: str, *, need_arguments: bool) -> list[Call] | None:
    """The calls in one block's JSON (an object or a list of them); None unless all are."""
    data = _loads(body)
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        key = next((k for k in _ARGUMENT_KEYS if k in item), None)
        if key is None and need_arguments:
            return None
        arguments = item[key] if key is not None else {}
        calls.append((item["name"], arguments if isinstance(arguments, str)
                      else json.dumps(arguments, ensure_ascii=False)))
    return calls or None


def _loads(body: str) -> Any:
    try:
        return json.loads(body, strict=False)
    except ValueError:
        # "" (json-repair's answer for text with no JSON in it) is not a call either.
        return json_repair.loads(body)
