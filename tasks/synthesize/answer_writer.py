"""The final answer of a guided attempt in the messages form: the teacher words a reply around
the facts the executed ground truth established (APIGen-MT's blueprint first, then the wording).

Asked inside the agent conversation, a small teacher often cannot finish it: after a tool result
it writes the call again as text, loops until it is cut off, or repeats the request. Here it is
asked apart, as a writer: the user's request, what the calls returned, and the facts the reply
must state, for a reply in the request's language under a JSON grammar of one bounded string (so
it cannot run on). The reply joins the conversation as the assistant's last turn; the verifier
still checks it like any answer (facts found and grounded, no defect).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from agentune.tasks.llm.types import ChatRequest, ChatResult

RESULT_CHARS = 800
"""Each tool result shown to the writer is cut to this many characters."""


def _schema(max_chars: int) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "answer": {"type": "string", "minLength": 1, "maxLength": max_chars}},
        "required": ["answer"], "additionalProperties": False}


def answer_request(request: str, kind: str, facts: Sequence[str], results: Sequence[str], *,
                   lang: str, max_chars: int, temperature: float, seed: int,
                   frequency_penalty: float = 0.0) -> ChatRequest:
    """The writer's request for a scenario of ``kind`` whose calls returned ``results``; the
    reply must state ``facts`` (of ``A|B``, the first wording)."""
    language = "Simplified Chinese" if lang == "zh" else "English"
    stated = "; ".join(f.split("|")[0] for f in facts)
    if kind == "irrelevant":
        task = ("None of the assistant's tools can do this. Write a short, polite reply that "
                "says it cannot do it and what the user could do instead.")
    elif kind == "no_tool":
        task = "The request needs no tool. Write a short, helpful reply of two to four sentences."
    else:
        shown = "\n".join(f"- {r[:RESULT_CHARS]}" for r in results)
        task = (f"The assistant's tool calls returned:\n{shown}\n\nWrite the reply in one to "
                "three sentences that tell the user the outcome.")
    if stated:
        task += f" It must state each of these exactly as written: {stated}."
    system = (f"You write an AI assistant's final reply to its user, in {language}, speaking "
              "to the user directly (not about the conversation): plain sentences, no JSON, no "
              "code, no list of raw records. Reply with JSON only.")
    user = f"The user asked: {request}\n\n{task}\n\nAnswer as {{\"answer\": \"...\"}}."
    digest = hashlib.sha256(f"{seed}|{request}".encode()).digest()
    return ChatRequest(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        response_format={"type": "json_schema", "json_schema": {
            "name": "final_answer", "schema": _schema(max_chars), "strict": True}},
        temperature=temperature, seed=int.from_bytes(digest[:4], "big") % 2**31,
        max_tokens=32 + max_chars, frequency_penalty=frequency_penalty)


def read_answer(result: ChatResult) -> str | None:
    """The reply text, or None when the answer is not the expected JSON."""
    text = result.content_field("answer")
    return text.strip() if isinstance(text, str) and text.strip() else None
