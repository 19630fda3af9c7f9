"""The judge's score of a text written as a user's request (an expanded query, a teacher-written
scenario): is it something a real user would ask, clear, and fit for the context it was written
for? Scores 1-10 under a JSON schema; what is kept above a threshold is the caller's rule."""

from __future__ import annotations

from typing import Any

from agentune.tasks.llm.judge_answers import JudgeAnswerError, judge_object, judge_score
from agentune.tasks.llm.types import ChatRequest, ChatResult

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rationale": {"type": "string", "minLength": 1, "maxLength": 160},
                   "score": {"type": "integer", "minimum": 1, "maximum": 10}},
    "required": ["rationale", "score"], "additionalProperties": False}


def request_judge_request(text: str, context: str, *, seed: int = 0) -> ChatRequest:
    """``context``: what the request was written for (a scenario's examples, its calls)."""
    return ChatRequest(
        messages=[
            {"role": "system", "content": "You review user requests written for testing an AI "
             "assistant. Score 1-10 how much the request reads like a real user's: natural "
             "language, clear, specific, and fitting its context. Gibberish, fragments of code "
             "or templates, and text unrelated to the context score 1. Reply with JSON only."},
            {"role": "user", "content": f"Context: {context}\n\nRequest: {text}\n\nReply as "
             "{\"rationale\": \"...\", \"score\": N}."}],
        response_format={"type": "json_schema", "json_schema": {
            "name": "request_judgement", "schema": SCHEMA, "strict": True}},
        temperature=0.0, seed=seed, max_tokens=96)


def read_request_score(result: ChatResult) -> int | None:
    """The whole score from 1 to 10; None when the answer gives none (the caller counts it)."""
    try:
        score = judge_score(judge_object(result))
    except JudgeAnswerError:
        return None
    return int(score) if score.is_integer() else None
