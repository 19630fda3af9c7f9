"""MAT keeps a judged prompt instance when the candidate template beat the benchmark by more than
epsilon, and a dropped template takes its instances with it: the kept instances are what the
filter exists for. Each becomes a one-step trajectory: the candidate's prompt as the teacher saw
it and the teacher's answer, in the messages form (user prompt, assistant answer) and as the step
of the steps form. They come from query sets, not scenarios, so they are not verified
(``source: judged_instance``, ``verified: false``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from agentune.tasks.agent.formats import agent_format


def judged_instance_rows(judgements: Sequence[Mapping[str, Any]],
                         teacher_model: str) -> list[dict[str, Any]]:
    """One ``trajectories`` row per kept instance (its two judging orders merged)."""
    by_instance: dict[str, list[Mapping[str, Any]]] = {}
    for row in judgements:
        if row.get("kept"):
            by_instance.setdefault(str(row["instance_id"]), []).append(row)
    out = []
    for instance_id, orders in by_instance.items():
        first = orders[0]
        answer = str(first["candidate_answer"])
        calls = agent_format(str(first["protocol"])).parse(answer).calls_tool
        out.append({
            "id": instance_id, "query_id": first["query_id"], "set_id": first["set_id"],
            "query": first["query"], "lang": first["lang"], "template_id": first["template_id"],
            "template_source": "meta-agent", "protocol": first["protocol"],
            "task_type": "tool_selection" if calls else "timing_decision",
            "messages": [{"role": "user", "content": first["candidate_prompt"]},
                         {"role": "assistant", "content": answer}],
            "tools": [],
            "steps": [{"step": 0, "kind": "plan", "prompt": first["candidate_prompt"],
                       "completion": answer}],
            "n_steps": 1, "n_tool_calls": 0, "final_answer": "",
            "judge_score": fmean(float(o["score_candidate"]) for o in orders),
            "scenario_id": None, "kind": None, "verified": False, "reward": None,
            "attempt": 0, "guided": False, "source": "judged_instance",
            "teacher_model": teacher_model,
            "prompt_tokens": 0, "completion_tokens": 0,
        })
    return out
