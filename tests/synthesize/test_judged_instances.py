"""Kept judged instances become one-step trajectories; those of dropped templates never do."""

from __future__ import annotations

from typing import Any

from agentune.tasks.synthesize.judged_instances import judged_instance_rows


def judgement(instance: str, order: str, kept: bool, answer: str, score: float) -> dict[str, Any]:
    return {"instance_id": instance, "order": order, "kept": kept, "template_id": "tpl-1",
            "set_id": "set-en-000", "query_id": "q1", "query": "Weather in Oslo?", "lang": "en",
            "candidate_answer": answer, "candidate_prompt": "PROMPT: Weather in Oslo?",
            "protocol": "react", "score_candidate": score}


def test_kept_instances_become_rows_and_dropped_ones_do_not() -> None:
    call = "Thought: look\nAction: get_weather\nAction Input: Oslo"
    rows = judged_instance_rows([
        judgement("inst-a", "benchmark_first", True, call, 8.0),
        judgement("inst-a", "candidate_first", True, call, 6.0),
        judgement("inst-b", "benchmark_first", False, "Final Answer: sunny", 9.0),
    ], "teacher")
    assert [r["id"] for r in rows] == ["inst-a"]
    row = rows[0]
    assert row["source"] == "judged_instance" and row["verified"] is False
    assert row["judge_score"] == 7.0 and row["task_type"] == "tool_selection"
    assert row["messages"] == [{"role": "user", "content": "PROMPT: Weather in Oslo?"},
                               {"role": "assistant", "content": call}]
    assert row["steps"] == [{"step": 0, "kind": "plan", "prompt": "PROMPT: Weather in Oslo?",
                             "completion": call}]
