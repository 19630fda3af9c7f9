"""The verifier: a trajectory's calls replayed in a fresh episode and judged against its scenario.

Components (each in [0, 1]):

- ``format_compliance``: share of steps that parse and whose calls name an offered tool with
  schema-valid arguments;
- ``execution``: share of the replayed calls that succeeded;
- ``state``: the replay's end state equals the ground truth's (generated values left out, list
  order ignored: independent calls may come in any order). A rollout that stops to ask the user
  must have changed nothing yet;
- ``answer``: share of the required facts the final answer states (when the task calls tools, a
  fact counts only if a replayed call returned it or the user said it: a claim nothing backs is
  made up); for ``irrelevant`` an answer with no call (a decline); for ``missing_info`` that ends
  asking, the question. Text that is no answer (it loops, writes a tool call out, carries prompt
  markup, restates the request: :func:`~agentune.tasks.verifier.answers.answer_defect`) scores 0;
- ``tool_accuracy``: F1 of the calls (name and arguments) against the ground truth's;
- ``efficiency``: (ground-truth steps + 1) / (steps taken + 1), at most 1 (the +1 is the answer);
- ``timing_quality``: a call when the task needs one, none when not, a question first when
  information is missing;
- ``task_completion``: (state + answer) / 2.

Penalties: ``wrong_tool`` (a tool the ground truth does not use), ``redundant_call`` (the same call
again), ``format_error``, ``timeout`` (stopped at a cap without answering). The reward is the
weighted sum of five components plus the penalties that apply; a trajectory passes when its task
is complete, its timing right, its format clean, no penalty applies and every call succeeded
(unless recovered errors are allowed). :attr:`Verdict.reasons` names what failed.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import CALLING_KINDS, Call, Scenario
from agentune.tasks.environments.state import state_diff, states_equal
from agentune.tasks.tools.arguments import canonical_json, validate_arguments, with_defaults
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.verifier import VERSION
from agentune.tasks.verifier.answers import (
    answer_defect,
    fact_found,
    judge_facts,
    missing_facts,
)
from agentune.tasks.verifier.rollout import Rollout

COMPONENTS = ("task_completion", "tool_accuracy", "efficiency", "timing_quality",
              "format_compliance", "execution", "state", "answer")
PENALTIES = ("wrong_tool", "redundant_call", "format_error", "timeout")


@dataclass
class Verdict:
    """The verifier's judgement of one trajectory."""

    components: dict[str, float]
    penalties: dict[str, bool]
    reward: float
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """Why it did not pass: ``state``, ``answer``, ``timing``, ``format``, ``execution``,
    ``wrong_tool``, ``redundant_call``, ``timeout`` (in that order)."""
    details: list[str] = field(default_factory=list)
    version: str = VERSION

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def _key(call: Call, tools: Mapping[str, ToolSpec]) -> str:
    """A call as compared: its name and its arguments with the schema's defaults filled in (a
    default given explicitly is the same call as one left out)."""
    tool = tools.get(call.name)
    arguments = with_defaults(tool.parameters, dict(call.arguments)) if tool else call.arguments
    return f"{call.name}:{canonical_json(dict(arguments))}"


def call_f1(made: Sequence[Call], expected: Sequence[Call],
            tools: Mapping[str, ToolSpec]) -> float:
    """F1 of the calls made against the expected ones (a multiset match on name + arguments)."""
    if not made and not expected:
        return 1.0
    hits = sum((Counter(_key(c, tools) for c in made)
                & Counter(_key(c, tools) for c in expected)).values())
    if hits == 0:
        return 0.0
    precision, recall = hits / len(made), hits / len(expected)
    return 2 * precision * recall / (precision + recall)


@dataclass
class _Replay:
    valid_steps: int = 0
    bad_steps: int = 0
    calls: int = 0
    failed: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    """What the replayed calls returned: the facts of an answer must be found here."""
    details: list[str] = field(default_factory=list)


def call_problem(call: Call, offered: Mapping[str, ToolSpec]) -> str | None:
    """Why ``call`` cannot run against the ``offered`` tools (an unknown tool, arguments its
    schema refuses), or None."""
    tool = offered.get(call.name)
    if tool is None:
        return f"unknown tool {call.name!r}"
    if problems := validate_arguments(tool.parameters, dict(call.arguments)):
        return f"{call.name}: " + "; ".join(map(str, problems))
    return None


async def _replay(scenario: Scenario, rollout: Rollout, episode: Episode,
                  now: dt.datetime | None) -> _Replay:
    """Every call action's well-formed calls run in a fresh session, in order."""
    session = episode.open(scenario, now)
    offered = {t.name: t for t in session.tools()}
    out = _Replay()
    for i, action in enumerate(rollout.actions):
        bad = [action.problem] if action.problem else []
        runnable: list[Call] = []
        for call in action.calls:
            if problem := call_problem(call, offered):
                bad.append(problem)
            else:
                runnable.append(call)
        if bad:
            out.bad_steps += 1
            out.details.append(f"step {i}: " + "; ".join(bad))
        else:
            out.valid_steps += 1
        if runnable:
            for call, obs in zip(runnable, await episode.run_step(runnable, session),
                                 strict=True):
                out.calls += 1
                out.seen.append(obs.content)
                if not obs.ok:
                    out.failed += 1
                    out.details.append(f"step {i}: {call.name} failed: {obs.content[:160]}")
    out.state = session.state()
    return out


def _timing(scenario: Scenario, rollout: Rollout, writes: frozenset[str]) -> float:
    calls = rollout.calls()
    if scenario.kind in ("no_tool", "irrelevant"):
        return 0.0 if calls else 1.0
    if scenario.kind == "missing_info":
        for action in rollout.actions:
            if action.kind == "ask":
                return 1.0
            if any(c.name in writes for c in action.calls):
                return 0.0
        return 0.0
    return 1.0 if calls else 0.0


def _redundant(rollout: Rollout, tools: Mapping[str, ToolSpec]) -> list[str]:
    counts = Counter(_key(c, tools) for c in rollout.calls())
    return [key for key, n in counts.items() if n > 1]


async def verify(scenario: Scenario, expected_state: Mapping[str, Any], rollout: Rollout,
                 episode: Episode, config: VerifierConfig, *,
                 initial_state: Mapping[str, Any] | None = None,
                 now: dt.datetime | None = None) -> Verdict:
    """Judge ``rollout`` against ``scenario``, whose ground truth ended in ``expected_state``
    (and started from ``initial_state``: the state a rollout that only asked must keep), replayed
    at the clock ``now`` (default: the episode's)."""
    catalog = episode.catalog
    offered = catalog.offered(scenario.environment)
    generated = {spec.name: spec.generated for spec in offered}
    writes = frozenset(t for spec in offered for t in spec.writes)
    tools = {t.name: t for spec in offered for t in spec.tools}
    replay = await _replay(scenario, rollout, episode, now)
    details = list(replay.details)

    asked_only = scenario.kind == "missing_info" and rollout.ended_asking()
    target = initial_state if asked_only and initial_state is not None else expected_state
    state_ok = all(states_equal(target.get(env), replay.state.get(env), generated.get(env, ()))
                   for env in set(target) | set(replay.state))
    if not state_ok:
        for env in sorted(set(target) | set(replay.state)):
            details += [f"state {env}: {d}" for d in state_diff(
                target.get(env), replay.state.get(env), generated.get(env, ()))]

    answer = rollout.final_answer()
    defect = None if answer is None or asked_only else answer_defect(answer, scenario.request)
    if asked_only:
        answer_score = 1.0
    elif answer is None:
        answer_score = 0.0
        details.append("no final answer")
    elif defect is not None:
        answer_score = 0.0
        details.append(f"the answer {defect}")
    elif scenario.kind == "irrelevant":
        answer_score = 1.0 if answer and not rollout.calls() else 0.0
    else:
        missing = missing_facts(scenario.facts, answer)
        if missing and config.answer_judge and episode.gateway is not None:
            stated = await judge_facts(episode.gateway, scenario.request, missing, answer,
                                       stage=episode.stage)
            missing = [f for f, ok in zip(missing, stated, strict=True) if not ok]
        if missing:
            details.append(f"answer misses: {missing}")
        if scenario.kind in CALLING_KINDS:
            # A fact the calls never returned (nor the user said) is made up, even when true.
            known = "\n".join([scenario.request, scenario.hidden or "", *replay.seen])
            ungrounded = [f for f in scenario.facts
                          if f not in missing and not fact_found(f, known)]
            if ungrounded:
                details.append(f"answer states what no call returned: {ungrounded}")
            missing += ungrounded
        answer_score = (1.0 - len(missing) / len(scenario.facts)) if scenario.facts else \
            (1.0 if answer.strip() else 0.0)

    expected_calls = [] if asked_only else scenario.calls()
    gt_steps = 0 if asked_only else len(scenario.ground_truth)
    steps = replay.valid_steps + replay.bad_steps
    components = {
        "state": 1.0 if state_ok else 0.0,
        "answer": answer_score,
        "tool_accuracy": call_f1(rollout.calls(), expected_calls, tools),
        "efficiency": min(1.0, (gt_steps + 1) / (rollout.call_steps() + 1)),
        "timing_quality": _timing(scenario, rollout, writes),
        "format_compliance": replay.valid_steps / steps if steps else 1.0,
        "execution": 1.0 - replay.failed / replay.calls if replay.calls else 1.0,
    }
    components["task_completion"] = (components["state"] + components["answer"]) / 2
    needed = {c.name for c in scenario.calls()}
    wrong = sorted({c.name for c in rollout.calls()} - needed) \
        if scenario.kind in CALLING_KINDS else []
    redundant = _redundant(rollout, tools)
    penalties = {
        "wrong_tool": bool(wrong),
        "redundant_call": bool(redundant),
        "format_error": replay.bad_steps > 0,
        "timeout": rollout.truncated and answer is None and not asked_only,
    }
    if wrong:
        details.append(f"wrong tools: {wrong}")
    if redundant:
        details.append(f"repeated calls: {redundant}")
    weights = config.weights.model_dump()
    reward = sum(w * components[name] for name, w in weights.items()) + sum(
        value for name, value in config.penalties.model_dump().items() if penalties[name])
    reasons = [reason for reason, failed in (
        ("state", components["state"] < 1.0),
        ("answer", components["answer"] < 1.0),
        ("timing", components["timing_quality"] < 1.0),
        ("format", components["format_compliance"] < 1.0),
        ("execution", components["execution"] < 1.0 and not config.allow_recovered_errors),
        ("wrong_tool", penalties["wrong_tool"]),
        ("redundant_call", penalties["redundant_call"]),
        ("timeout", penalties["timeout"]),
    ) if failed]
    return Verdict(components={k: round(components[k], 6) for k in COMPONENTS},
                   penalties=penalties, reward=round(reward, 6), passed=not reasons,
                   reasons=reasons, details=details)
