"""A judge's answer read once for every judge (tasks/llm/judge_answers.py): the object, its
scores from 1 to 10, and an error that says what is wrong."""

from __future__ import annotations

import json

import pytest

from agentune.tasks.agent.request_judge import read_request_score
from agentune.tasks.llm.judge_answers import JudgeAnswerError, judge_object, judge_score
from agentune.tasks.llm.types import ChatResult


def answer(content: str, finish_reason: str = "stop") -> ChatResult:
    return ChatResult(content=content, finish_reason=finish_reason)


@pytest.mark.parametrize(("content", "finish", "message"), [
    ('{"score": 7, "rationale": "ok"}', "length", "cut off at max_tokens"),
    ('{"score": 7,', "stop", "not JSON"),
    ("[7]", "stop", "not a JSON object"),
])
def test_an_unreadable_answer_says_why(content: str, finish: str, message: str) -> None:
    with pytest.raises(JudgeAnswerError, match=message):
        judge_object(answer(content, finish))


@pytest.mark.parametrize("score", [0, 11, True, "7", None, 10.5])
def test_a_score_runs_from_1_to_10(score: object) -> None:
    with pytest.raises(JudgeAnswerError, match=r"answer_a\.score must be a number from 1 to 10"):
        judge_score({"score": score}, "answer_a.score")


def test_a_readable_answer() -> None:
    data = judge_object(answer(json.dumps({"score": 8, "rationale": "clear"})))
    assert judge_score(data) == 8.0 and data["rationale"] == "clear"


@pytest.mark.parametrize(("content", "score"), [
    ('{"score": 6, "rationale": "r"}', 6), ('{"score": 6.0, "rationale": "r"}', 6),
    ('{"score": 6.5, "rationale": "r"}', None), ('{"score": true, "rationale": "r"}', None),
    ('{"score": 12, "rationale": "r"}', None), ("not json", None)])
def test_the_request_judge_takes_a_whole_score_or_none(content: str, score: int | None) -> None:
    assert read_request_score(answer(content)) == score
