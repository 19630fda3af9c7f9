"""The two forms of a trajectory, as one ``trajectories`` row (``schemas.TRAJECTORY_FEATURES``)
and one ``attempts`` row (``schemas.ATTEMPT_FEATURES``).

(a) ``messages`` + ``tools`` in the OpenAI chat format, ready for a chat template: the template's
Profile as the system message, the query as the user message, one assistant message per step
(its thought as content, ``tool_calls`` with arguments as an object; parallel calls together)
followed by the ``tool`` messages with the observations, a question to the user and the user's
reply as an assistant and a user message, and the final answer as the last assistant message
(:meth:`TrajectoryOutcome.messages`). Failed calls and the steps after them stay in: they are
the reflection examples.

(b) ``steps``: one ``{step, kind, prompt, completion}`` per teacher step in the template's own
text format (``plan`` for planner steps, ``conclude`` for a concluder's answer): the
KAgentInstruct shape, each step an independent instruction/input/output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentune.tasks.synthesize.agent_loop import TrajectoryOutcome
from agentune.tasks.tools.catalog import ToolSpec


def attempt_id(outcome: TrajectoryOutcome) -> str:
    """A scenario combination's attempts are ``<combination>.a<k>``; a plain query's one attempt
    is the combination itself."""
    combo = outcome.combination
    return combo.id if combo.scenario_id is None else f"{combo.id}.a{outcome.attempt}"


def trajectory_row(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                   teacher_model: str) -> dict[str, Any]:
    """The ``trajectories`` row of an accepted outcome."""
    if not outcome.accepted:
        raise ValueError(f"{outcome.combination.id} was rejected ({outcome.reason})")
    combo, template = outcome.combination, outcome.template
    verdict = outcome.verdict
    return {
        "id": attempt_id(outcome),
        "query_id": combo.query_id,
        "set_id": combo.set_id,
        "query": combo.query,
        "lang": combo.lang,
        "template_id": template.id,
        "template_source": template.source,
        "protocol": template.protocol,
        "task_type": combo.task_type,
        "messages": outcome.messages(),
        "tools": [tools[name].to_openai() for name in combo.tool_names],
        "steps": [dict(step) for step in outcome.steps],
        "n_steps": len(outcome.steps),
        "n_tool_calls": len(outcome.calls),
        "final_answer": outcome.final_answer or "",
        "judge_score": outcome.judge_score,
        "scenario_id": combo.scenario_id,
        "kind": combo.kind,
        "verified": verdict is not None,
        "reward": verdict.reward if verdict is not None else None,
        "attempt": outcome.attempt,
        "guided": outcome.guided,
        "source": "synthesized",
        "teacher_model": teacher_model,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
    }


def attempt_row(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec]) -> dict[str, Any]:
    """The ``attempts`` row of a verified attempt, passed or not."""
    combo, verdict = outcome.combination, outcome.verdict
    if verdict is None:
        raise ValueError(f"{attempt_id(outcome)} was not verified")
    return {
        "id": attempt_id(outcome), "combination_id": combo.id, "scenario_id": combo.scenario_id,
        "kind": combo.kind, "lang": combo.lang, "template_id": outcome.template.id,
        "protocol": outcome.template.protocol, "attempt": outcome.attempt,
        "guided": outcome.guided, "passed": outcome.accepted, "reason": outcome.reason, "reward": verdict.reward,
        "components": verdict.components, "penalties": verdict.penalties,
        "verifier_reasons": list(verdict.reasons), "verifier_version": verdict.version,
        "messages": outcome.messages(),
        "tools": [tools[name].to_openai() for name in combo.tool_names],
        "steps": [dict(step) for step in outcome.steps],
    }
