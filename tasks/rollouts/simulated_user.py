"""The simulated user: when the agent asks (``ask_user``), the teacher answers as the user who
made the request, from the scenario's hidden information only and without volunteering more.

The request is deterministic (temperature 0, a seed from the question), so a resumed run gets the
same reply from the response cache. A scenario without hidden information gets a fixed reply
("nothing to add") without a teacher call: asking there was needless, which the verifier marks.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentune.tasks.llm.types import ChatRequest, ChatResult

NOTHING_TO_ADD = {"zh": "我没有更多信息了，请直接处理。",
                  "en": "I have nothing more to add; please go ahead."}


def user_reply_schema(max_chars: int) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "reply": {"type": "string", "minLength": 1, "maxLength": max_chars}},
        "required": ["reply"], "additionalProperties": False}


def user_request(request: str, hidden: str, question: str, *, lang: str, max_chars: int,
                 seed: int) -> ChatRequest:
    language = "Simplified Chinese" if lang == "zh" else "English"
    system = ("You play a user talking to an AI assistant. You asked it something; it now asks "
              "you a question. Answer in one or two short sentences, in "
              f"{language}, using only the information you have, given below; do not volunteer "
              "anything it did not ask for, and if your information does not answer the "
              "question, say you do not know. Reply with JSON only.")
    user = (f"Your request was: {request}\n\nWhat you know: {hidden}\n\n"
            f"The assistant asks: {question}\n\nAnswer as {{\"reply\": \"...\"}}.")
    digest = hashlib.sha256(f"{seed}|{request}|{question}".encode()).digest()
    return ChatRequest(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        response_format={"type": "json_schema", "json_schema": {
            "name": "user_reply", "schema": user_reply_schema(max_chars), "strict": True}},
        temperature=0.0, seed=int.from_bytes(digest[:4], "big") % 2**31,
        max_tokens=32 + 3 * max_chars)


def read_user_reply(result: ChatResult) -> str | None:
    """The reply text, or None when the answer is not the expected JSON."""
    reply = result.content_field("reply")
    return reply.strip() if isinstance(reply, str) and reply.strip() else None
