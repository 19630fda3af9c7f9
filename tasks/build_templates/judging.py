"""Judging candidate templates against the benchmark templates (MAT, seed 001 section 4.2.2).

For a candidate and one query of its set, the query is rendered in a benchmark template and in
the candidate: a prompt pair. The teacher answers both prompts; the judge scores both answers on
a rubric (``templates/template_judge.j2``: 1-10 and a rationale each). Every pair is judged twice,
once with the benchmark's answer shown first and once with the candidate's, and each side's score
is the mean of its two scores, so a judge that prefers a position favours neither side.

Rules (pure functions, so tests can check them on any scores):

- an instance is kept when ``score_candidate - score_benchmark > epsilon`` (a tie with epsilon
  drops it);
- a template's score is the mean of its candidate scores over all its instances;
- a template is kept when its score ``>= threshold`` (a tie keeps it) and at least one of its
  instances was kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Literal

from agentune.tasks.agent.formats import agent_format
from agentune.tasks.agent.prompt_templates import AgentPromptInputs, AgentTemplate, macro_request
from agentune.tasks.build_templates import STAGE
from agentune.tasks.common.figures import png_figure
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.judge_answers import JudgeAnswerError, judge_object, judge_score
from agentune.tasks.llm.types import ChatGateway, ChatRequest, ChatResult

PROMPT = "template_judge.j2"
Order = Literal["benchmark_first", "candidate_first"]
ORDERS: tuple[Order, ...] = ("benchmark_first", "candidate_first")
MAX_TOOLS_SHOWN = 12


@dataclass(frozen=True)
class JudgedQuery:
    query_id: str
    text: str
    lang: str
    tools: tuple[dict[str, Any], ...]
    """The tools offered with this query: ``{name, description, parameters}``."""


@dataclass(frozen=True)
class PromptPair:
    """One instance: a query rendered in a benchmark template and in a candidate."""

    instance_id: str
    candidate: AgentTemplate
    benchmark: AgentTemplate
    benchmark_name: str
    query: JudgedQuery
    benchmark_prompt: str
    candidate_prompt: str


def instance_id(candidate_id: str, benchmark: str, query_id: str) -> str:
    digest = hashlib.sha256(f"{candidate_id}|{benchmark}|{query_id}".encode()).hexdigest()[:10]
    return f"inst-{digest}"


def prompt_pair(candidate: AgentTemplate, benchmark_name: str, benchmark: AgentTemplate,
                query: JudgedQuery, *, current_time: Any) -> PromptPair:
    inputs = AgentPromptInputs.for_query(query.text, query.tools, current_time=current_time,
                                         lang=query.lang)
    return PromptPair(
        instance_id=instance_id(candidate.id, benchmark_name, query.query_id),
        candidate=candidate,
        benchmark=benchmark,
        benchmark_name=benchmark_name,
        query=query,
        benchmark_prompt=benchmark.render(inputs),
        candidate_prompt=candidate.render(inputs),
    )


# --------------------------------------------------------------------------- requests


def answer_request(prompt: str, *, max_tokens: int, temperature: float | None,
                   seed: int | None = None) -> ChatRequest:
    """The teacher answering a rendered agent prompt, as one user message (free text: the
    answer's format is what the template asks for, and part of what is judged)."""
    return ChatRequest(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                       temperature=temperature, seed=seed)


def judge_schema(max_chars: int) -> dict[str, Any]:
    side = {
        "type": "object",
        "properties": {
            "rationale": {"type": "string", "minLength": 1, "maxLength": max_chars},
            "score": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["rationale", "score"],
        "additionalProperties": False,
    }
    return {"type": "object", "properties": {"answer_a": side, "answer_b": side},
            "required": ["answer_a", "answer_b"], "additionalProperties": False}


def judge_request(query: JudgedQuery, *, protocol_a: str, answer_a: str, protocol_b: str,
                  answer_b: str, max_chars: int, seed: int | None = None) -> ChatRequest:
    """The judge request scoring answer A and answer B (greedy: a judgement should not be luck)."""
    tools = [(t["name"], t["description"]) for t in query.tools[:MAX_TOOLS_SHOWN]]
    user = dict(
        query=query.text, tools=tools,
        format_a=agent_format(protocol_a).summary, answer_a=answer_a.strip() or "(empty)",
        format_b=agent_format(protocol_b).summary, answer_b=answer_b.strip() or "(empty)",
        max_chars=max_chars,
    )
    return macro_request(
        PROMPT, user, schema_name="template_judgement", schema=judge_schema(max_chars),
        temperature=0.0,
        seed=seed,
        # Two rationales in English (about a token per 3-4 characters; room for one per char).
        max_tokens=2 * max_chars + 64,
    )


@dataclass(frozen=True)
class SideScore:
    score: float
    rationale: str


def parse_judgement(result: ChatResult) -> tuple[SideScore, SideScore]:
    """(answer A, answer B) from a judge answer; raises :class:`JudgeAnswerError`."""
    data = judge_object(result)
    sides = []
    for key in ("answer_a", "answer_b"):
        side = data.get(key)
        if not isinstance(side, dict):
            raise JudgeAnswerError(f"judge answer has no object {key!r}")
        sides.append(SideScore(judge_score(side, f"{key}.score"),
                               str(side.get("rationale", "")).strip()))
    return sides[0], sides[1]


# --------------------------------------------------------------------------- judging one pair


@dataclass(frozen=True)
class OrderJudgement:
    """One judging order of an instance, with each side's score under its own name."""

    order: Order
    benchmark: SideScore
    candidate: SideScore

    @property
    def delta(self) -> float:
        return self.candidate.score - self.benchmark.score


@dataclass(frozen=True)
class InstanceJudgement:
    pair: PromptPair
    benchmark_answer: str
    candidate_answer: str
    orders: tuple[OrderJudgement, ...]

    @property
    def score_benchmark(self) -> float:
        return fmean(o.benchmark.score for o in self.orders)

    @property
    def score_candidate(self) -> float:
        return fmean(o.candidate.score for o in self.orders)

    @property
    def delta(self) -> float:
        """Candidate minus benchmark, each the mean over both orders."""
        return self.score_candidate - self.score_benchmark


@dataclass(frozen=True)
class JudgingFailure:
    pair: PromptPair
    reason: Literal["answer_failed", "judge_failed"]
    detail: str


@dataclass(frozen=True)
class JudgingSettings:
    answer_max_tokens: int = 512
    answer_temperature: float | None = 0.0
    rationale_max_chars: int = 400
    seed: int | None = None


async def _ask(gateway: ChatGateway, role: Literal["teacher", "judge"],
               request: ChatRequest) -> ChatResult:
    return await gateway.chat(role, request, stage=STAGE)


async def judge_pair(gateway: ChatGateway, pair: PromptPair,
                     settings: JudgingSettings) -> InstanceJudgement | JudgingFailure:
    """Answer both prompts with the teacher, then judge in both orders (all concurrently where
    the gateway allows). Budget exhaustion propagates; other failures become a
    :class:`JudgingFailure`."""
    def answer(prompt: str) -> ChatRequest:
        return answer_request(prompt, max_tokens=settings.answer_max_tokens,
                              temperature=settings.answer_temperature, seed=settings.seed)

    try:
        bench, cand = await asyncio.gather(_ask(gateway, "teacher", answer(pair.benchmark_prompt)),
                                           _ask(gateway, "teacher", answer(pair.candidate_prompt)))
    except GatewayError as exc:
        return JudgingFailure(pair, "answer_failed", str(exc))
    bench_text, cand_text = bench.content or "", cand.content or ""
    sides = {"benchmark": (pair.benchmark.protocol, bench_text),
             "candidate": (pair.candidate.protocol, cand_text)}

    def request(order: Order) -> ChatRequest:
        first, second = (("benchmark", "candidate") if order == "benchmark_first"
                         else ("candidate", "benchmark"))
        return judge_request(pair.query, protocol_a=sides[first][0], answer_a=sides[first][1],
                             protocol_b=sides[second][0], answer_b=sides[second][1],
                             max_chars=settings.rationale_max_chars, seed=settings.seed)

    try:
        results = await asyncio.gather(*(_ask(gateway, "judge", request(o)) for o in ORDERS))
        orders = []
        for order, result in zip(ORDERS, results, strict=True):
            a, b = parse_judgement(result)
            bench_side, cand_side = (a, b) if order == "benchmark_first" else (b, a)
            orders.append(OrderJudgement(order, bench_side, cand_side))
    except (GatewayError, JudgeAnswerError) as exc:
        return JudgingFailure(pair, "judge_failed", str(exc))
    return InstanceJudgement(pair, bench_text, cand_text, tuple(orders))


# --------------------------------------------------------------------------- the rules


def keep_instance(delta: float, epsilon: float) -> bool:
    """MAT's instance rule: the candidate must beat the benchmark by more than epsilon."""
    return delta > epsilon


@dataclass(frozen=True)
class TemplateScore:
    """A candidate's verdict from its judged instances."""

    score: float | None
    n_instances: int
    n_kept_instances: int
    kept: bool
    reason: str | None
    """Why it was dropped: ``no_judged_instance``, ``below_threshold`` or
    ``no_instance_above_epsilon``; None when kept."""


def score_template(candidate_scores: Sequence[float], deltas: Sequence[float], *,
                   epsilon: float, threshold: float) -> TemplateScore:
    """Template score = mean candidate score over all instances; kept when it reaches the
    threshold and at least one instance beat its benchmark by more than epsilon."""
    if len(candidate_scores) != len(deltas):
        raise ValueError("one candidate score and one delta per instance")
    if not deltas:
        return TemplateScore(None, 0, 0, False, "no_judged_instance")
    score = fmean(candidate_scores)
    n_kept = sum(keep_instance(d, epsilon) for d in deltas)
    if score < threshold:
        reason: str | None = "below_threshold"
    elif n_kept == 0:
        reason = "no_instance_above_epsilon"
    else:
        reason = None
    return TemplateScore(score, len(deltas), n_kept, reason is None, reason)


def plot_delta_histogram(deltas: Sequence[float], epsilon: float, path: Path) -> Path:
    """A PNG histogram of instance deltas (candidate minus benchmark) with epsilon marked."""
    from matplotlib.ticker import MaxNLocator

    kept = sum(keep_instance(d, epsilon) for d in deltas)
    with png_figure(path, title="Candidate minus benchmark score per instance "
                    f"({kept} of {len(deltas)} above epsilon)",
                    xlabel="score_candidate - score_benchmark (judge, 1-10, mean of both orders)",
                    ylabel="instances") as ax:
        if deltas:
            # Deltas of integer scores averaged over two orders lie on a 0.5 grid: one bar per
            # grid value, centred on it.
            low = math.floor(min(min(deltas), epsilon) * 2) / 2 - 0.25
            high = math.ceil(max(max(deltas), epsilon) * 2) / 2 + 0.25
            ax.hist(deltas, bins=round((high - low) / 0.5), range=(low, high), color="#4c72b0",
                    edgecolor="white")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            ax.text(0.5, 0.5, "no judged instances", ha="center", va="center",
                    transform=ax.transAxes)
        ax.axvline(epsilon, color="#c44e52", linestyle="--", label=f"epsilon = {epsilon:g}")
        ax.legend(loc="upper left")
    return path
