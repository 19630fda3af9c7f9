"""The two forms of an accepted trajectory, as one ``trajectories`` row
(``schemas.TRAJECTORY_FEATURES``).

(a) ``messages`` + ``tools`` in the OpenAI chat format, ready for a chat template: the template's
Profile as the system message, the query as the user message, one assistant message per tool
call (its thought as content, ``tool_calls`` with arguments as an object) each followed by a
``tool`` message with the observation, and the final answer as the last assistant message.
Failed calls and the steps after them stay in: they are the reflection examples.

(b) ``steps``: one ``{step, kind, prompt, completion}`` per teacher step in the template's own
text format (``plan`` for planner steps, ``conclude`` for a concluder's answer): the
KAgentInstruct shape, each step an independent instruction/input/output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentune.tasks.synthesize.agent_loop import TrajectoryOutcome
from agentune.tasks.tools.catalog import ToolSpec


def call_id(step: int) -> str:
    return f"call_{step}"


def chat_messages(outcome: TrajectoryOutcome) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if outcome.system:
        messages.append({"role": "system", "content": outcome.system})
    messages.append({"role": "user", "content": outcome.combination.query})
    for call in outcome.calls:
        messages.append({
            "role": "assistant", "content": call.thought,
            "tool_calls": [{"id": call_id(call.step), "type": "function",
                            "function": {"name": call.tool, "arguments": dict(call.arguments)}}],
        })
        messages.append({"role": "tool", "tool_call_id": call_id(call.step), "name": call.tool,
                         "content": call.observation.content})
    messages.append({"role": "assistant", "content": outcome.final_answer or ""})
    return messages


def trajectory_row(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                   teacher_model: str) -> dict[str, Any]:
    """The ``trajectories`` row of an accepted outcome."""
    if not outcome.accepted:
        raise ValueError(f"{outcome.combination.id} was rejected ({outcome.reason})")
    combo, template = outcome.combination, outcome.template
    return {
        "id": combo.id,
        "query_id": combo.query_id,
        "set_id": combo.set_id,
        "query": combo.query,
        "lang": combo.lang,
        "template_id": template.id,
        "template_source": template.source,
        "protocol": template.protocol,
        "task_type": combo.task_type,
        "messages": chat_messages(outcome),
        "tools": [tools[name].to_openai() for name in combo.tool_names],
        "steps": [dict(step) for step in outcome.steps],
        "n_steps": len(outcome.steps),
        "n_tool_calls": len(outcome.calls),
        "final_answer": outcome.final_answer or "",
        "judge_score": outcome.judge_score,
        "teacher_model": teacher_model,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
    }
