"""Judging prompt pairs: the epsilon and threshold rules on scores that come back from a real
OpenAI-compatible server (keep, drop by epsilon, drop by threshold, ties), judging in both orders
to cancel position bias, failures, and the delta histogram."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.agent.prompt_templates import (
    benchmark_template,
    compose_template,
    load_template,
)
from agentune.tasks.build_templates.judging import (
    InstanceJudgement,
    JudgedQuery,
    JudgingFailure,
    JudgingSettings,
    judge_pair,
    keep_instance,
    parse_judgement,
    plot_delta_histogram,
    prompt_pair,
    score_template,
)
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.judge_answers import JudgeAnswerError
from agentune.tasks.llm.types import ChatResult

from support.openai_server import Fail, OpenAITestServer, Reply

CANDIDATE_SECTIONS = {
    "profile": "You are Orbit, a weather concierge.",
    "instruction": "1. Check the forecast tool first.\n2. Answer in one sentence.",
    "tools": "Tools:\n{tools}",
    "goal": "Request: {goal}",
    "memory": "Done:\n{completed_tasks}\nChat:\n{conversation_history}\nFacts:\n{knowledge}\n"
              "Now: {current_time}",
    "format": "Reply like this:\n{output_format}",
}
CANDIDATE = load_template(compose_template(CANDIDATE_SECTIONS), id="tpl-weather-00",
                          protocol="kuaiagent", lang="en")
TOOLS = ({"name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},)


def query(n: int = 0) -> JudgedQuery:
    return JudgedQuery(f"q{n}", f"Will it rain in city number {n}?", "en", TOOLS)


def pair(n: int = 0):  # type: ignore[no-untyped-def]
    return prompt_pair(CANDIDATE, "kuaiagent", benchmark_template("kuaiagent"), query(n),
                       current_time=datetime(2025, 6, 2, 9, 30))


ANSWER_OF = {"candidate": "ANSWER-FROM-CANDIDATE", "benchmark": "ANSWER-FROM-BENCHMARK"}


class ScriptedModels:
    """Teacher and judge behind one test server. The teacher's answer says which prompt it got
    (the candidate's profile names Orbit); the judge scores by ``score(side, position, query)``."""

    def __init__(self, score: Callable[[str, str, str], int]) -> None:
        self.score = score
        self.judged: list[tuple[str, str]] = []  # (side shown as A, side shown as B)

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        user = body["messages"][-1]["content"]
        if body.get("response_format") is None:
            side = "candidate" if "You are Orbit" in user else "benchmark"
            return Reply(ANSWER_OF[side])
        a = re.search(r"<answer_a>\n(.*?)\n</answer_a>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
        b = re.search(r"<answer_b>\n(.*?)\n</answer_b>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
        q = re.search(r"User request: (.*)", user).group(1)  # type: ignore[union-attr]
        sides = ["candidate" if "CANDIDATE" in x else "benchmark" for x in (a, b)]
        self.judged.append((sides[0], sides[1]))
        verdict = {
            key: {"rationale": f"{side} answer at {pos}", "score": self.score(side, pos, q)}
            for key, side, pos in (("answer_a", sides[0], "A"), ("answer_b", sides[1], "B"))
        }
        return Reply(json.dumps(verdict))


def gateway_for(server: OpenAITestServer) -> LLMGateway:
    role = RoleConfig(provider="openai", model="test-model", base_url=server.base_url,
                      max_retries=0)
    return LLMGateway(LLMConfig(teacher=role, judge=role, cache=False))


async def judge_all(server: OpenAITestServer, n_queries: int = 1) -> list[Any]:
    async with gateway_for(server) as gateway:
        return [await judge_pair(gateway, pair(i), JudgingSettings(rationale_max_chars=100))
                for i in range(n_queries)]


async def test_each_pair_is_judged_in_both_orders_and_position_bias_cancels(
        openai_server: Callable[..., OpenAITestServer]) -> None:
    # A judge that only looks at the position: A gets 9, B gets 3, whoever wrote them.
    models = ScriptedModels(lambda side, pos, q: 9 if pos == "A" else 3)
    judged = await judge_all(openai_server(models))
    inst = judged[0]
    assert isinstance(inst, InstanceJudgement)
    assert sorted(models.judged) == [("benchmark", "candidate"), ("candidate", "benchmark")]
    assert [o.order for o in inst.orders] == ["benchmark_first", "candidate_first"]
    assert [(o.benchmark.score, o.candidate.score) for o in inst.orders] == [(9, 3), (3, 9)]
    assert [o.delta for o in inst.orders] == [-6, 6]
    assert inst.score_benchmark == inst.score_candidate == 6.0 and inst.delta == 0.0
    assert inst.candidate_answer == ANSWER_OF["candidate"]
    assert inst.benchmark_answer == ANSWER_OF["benchmark"]
    assert inst.orders[1].candidate.rationale == "candidate answer at A"


@pytest.mark.parametrize("cand, bench, epsilon, threshold, kept, reason", [
    pytest.param(8, 6, 1.0, 7.0, True, None, id="keep"),
    pytest.param(7, 6, 1.0, 6.0, False, "no_instance_above_epsilon", id="drop-by-epsilon-tie"),
    pytest.param(6, 8, 0.0, 5.0, False, "no_instance_above_epsilon", id="drop-by-epsilon"),
    pytest.param(6, 3, 0.0, 6.5, False, "below_threshold", id="drop-by-threshold"),
    pytest.param(7, 5, 0.0, 7.0, True, None, id="threshold-tie-keeps"),
    pytest.param(5, 9, 0.0, 6.0, False, "below_threshold", id="both-fail-threshold-first"),
])
async def test_epsilon_and_threshold_on_judge_scores(
        openai_server: Callable[..., OpenAITestServer], cand: int, bench: int, epsilon: float,
        threshold: float, kept: bool, reason: str | None) -> None:
    models = ScriptedModels(lambda side, pos, q: cand if side == "candidate" else bench)
    judged = await judge_all(openai_server(models))
    inst = judged[0]
    assert isinstance(inst, InstanceJudgement)
    assert (inst.score_candidate, inst.score_benchmark) == (cand, bench)
    verdict = score_template([inst.score_candidate], [inst.delta], epsilon=epsilon,
                             threshold=threshold)
    assert (verdict.kept, verdict.reason) == (kept, reason)
    assert verdict.score == cand and verdict.n_instances == 1
    assert verdict.n_kept_instances == int(keep_instance(inst.delta, epsilon))


async def test_template_score_is_the_mean_over_instances(
        openai_server: Callable[..., OpenAITestServer]) -> None:
    # Query 0: the candidate wins 9:5. Query 1: it loses 5:6 when shown first and 6:6 second.
    def score(side: str, pos: str, q: str) -> int:
        if "number 0" in q:
            return 9 if side == "candidate" else 5
        if side == "benchmark":
            return 6
        return 5 if pos == "A" else 6

    judged = await judge_all(openai_server(ScriptedModels(score)), n_queries=2)
    assert all(isinstance(j, InstanceJudgement) for j in judged)
    deltas = [j.delta for j in judged]
    assert deltas == [4.0, -0.5]
    verdict = score_template([j.score_candidate for j in judged], deltas, epsilon=0.0,
                             threshold=7.0)
    assert verdict.score == pytest.approx((9 + 5.5) / 2) and verdict.n_kept_instances == 1
    assert verdict.kept and verdict.reason is None


async def test_failures_become_reasons(openai_server: Callable[..., OpenAITestServer]) -> None:
    def broken_judge(body: dict[str, Any], n: int) -> Reply | Fail:
        if body.get("response_format") is None:
            return Reply("answer")
        return Reply('{"answer_a": {"rationale": "x", "score": 11}, '
                     '"answer_b": {"rationale": "y", "score": 2}}')

    judged = await judge_all(openai_server(broken_judge))
    assert isinstance(judged[0], JudgingFailure) and judged[0].reason == "judge_failed"
    assert "score must be a number from 1 to 10" in judged[0].detail
    judged = await judge_all(openai_server(lambda body, n: Fail(400, message="bad request")))
    assert isinstance(judged[0], JudgingFailure) and judged[0].reason == "answer_failed"


@pytest.mark.parametrize("content, finish, message", [
    ("not json", "stop", "not JSON"),
    ('{"answer_a": {"rationale": "x", "score": 5}}', "stop", "no object 'answer_b'"),
    ('{"answer_a": {"score": true}, "answer_b": {"score": 3}}', "stop", "answer_a.score"),
    ('{"answer_a": {"rationale": "x", "sc', "length", "cut off"),
])
def test_parse_judgement_errors(content: str, finish: str, message: str) -> None:
    with pytest.raises(JudgeAnswerError, match=message):
        parse_judgement(ChatResult(content=content, finish_reason=finish))


def test_rules_without_instances_and_bad_input() -> None:
    assert score_template([], [], epsilon=0, threshold=5).reason == "no_judged_instance"
    with pytest.raises(ValueError):
        score_template([1.0], [], epsilon=0, threshold=5)
    assert keep_instance(0.5, 0.0) and not keep_instance(0.0, 0.0)
    assert keep_instance(-0.5, -1.0) and not keep_instance(-1.0, -1.0)


def test_delta_histogram_is_a_png(tmp_path: Path) -> None:
    for name, deltas in (("some.png", [-2.0, -0.5, 0.0, 0.5, 1.0, 3.5]), ("none.png", [])):
        path = plot_delta_histogram(deltas, 0.5, tmp_path / name)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 5_000
