"""Reading an LLM judge's answer: one JSON object whose scores run from 1 to 10.

The template judge (build_templates) and the answer judge (synthesize) ask for such an object
under a JSON schema; an answer cut off at ``max_tokens``, not JSON, or with a score out of range
is a :class:`JudgeAnswerError` that says which, and the caller records it as the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentune.tasks.llm.types import ChatResult


class JudgeAnswerError(ValueError):
    """A judge's answer that cannot be read as its verdict."""


def judge_object(result: ChatResult) -> dict[str, Any]:
    """The judge's answer as a JSON object."""
    if result.finish_reason == "length":
        raise JudgeAnswerError("judge answer cut off at max_tokens")
    try:
        data = json.loads(result.content or "")
    except json.JSONDecodeError as exc:
        raise JudgeAnswerError(f"judge answer is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise JudgeAnswerError("judge answer is not a JSON object")
    return data


def judge_score(data: Mapping[str, Any], where: str = "score") -> float:
    """``data["score"]``, a number from 1 to 10 (``where`` names it in the error)."""
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 1 <= score <= 10:
        raise JudgeAnswerError(f"{where} must be a number from 1 to 10, got {score!r}")
    return float(score)
