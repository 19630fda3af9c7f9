"""The judge's score of a trajectory's final answer: the off-topic gate of synthesis.

The judge sees the request, the calls with (shortened) results and the final answer
(``templates/trajectory_judge.j2``) and answers ``{"rationale", "score"}`` (1-10) under a JSON
schema, greedily, so a re-run asks the same question and hits the response cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentune.tasks.agent.prompt_templates import macro_request
from agentune.tasks.llm.judge_answers import judge_object, judge_score
from agentune.tasks.llm.types import ChatRequest, ChatResult

PROMPT = "trajectory_judge.j2"
RESULT_CHARS = 600
"""How much of each tool result the judge is shown."""


@dataclass(frozen=True)
class JudgedCall:
    tool: str
    arguments: Mapping[str, Any]
    result: str


@dataclass(frozen=True)
class AnswerScore:
    score: float
    rationale: str


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def judge_schema(max_chars: int) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"rationale": {"type": "string", "minLength": 1, "maxLength": max_chars},
                           "score": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["rationale", "score"], "additionalProperties": False}


def answer_judge_request(query: str, calls: Sequence[JudgedCall], answer: str, *,
                         max_chars: int, seed: int | None = None) -> ChatRequest:
    shown = [{"tool": c.tool, "arguments": json.dumps(dict(c.arguments), ensure_ascii=False),
              "result": _shorten(c.result, RESULT_CHARS)} for c in calls]
    user = dict(query=query, calls=shown, answer=answer.strip(), max_chars=max_chars)
    return macro_request(
        PROMPT, user, schema_name="answer_judgement", schema=judge_schema(max_chars),
        temperature=0.0, seed=seed,
        # An English rationale: about a token per 3-4 characters; room for one per character.
        max_tokens=max_chars + 32,
    )


def read_answer_score(result: ChatResult) -> AnswerScore:
    data = judge_object(result)
    return AnswerScore(judge_score(data), str(data.get("rationale", "")).strip())
