"""synthesize end to end with the embedded SmolLM2-135M as teacher, judge and simulated APIs, with
the demo's settings on a small plan: everything runs, and every combination ends as a well-formed
trajectory or a rejected one with a known reason (the 135M model's answers are weak by design)."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from agentune.config import load_config
from agentune.config.store import StoreConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_dataset.samples import sample_from_trajectory

from support.synthesis_inputs import planned, publish_inputs

REASONS = {"unparseable", "invalid_tool", "invalid_args", "repeated_call", "no_reflection",
           "truncated", "empty_answer", "gave_up", "step_cap", "no_tool_call",
           "unneeded_tool_call", "simulator_failure", "teacher_failed", "judge_failed",
           "teacher_unavailable", "judge_unavailable", "prompt_injection", "off_topic"}


@pytest.mark.slow
async def test_embedded_model_end_to_end(prefect_api: None, tmp_path: Path) -> None:
    from agentune.flows.synthesize import synthesize

    store = publish_inputs(tmp_path / "store")
    demo = load_config(PROJECT_ROOT / "configs" / "demo.yaml")
    config = demo.model_copy(update={
        "store": StoreConfig(root=str(tmp_path / "store")),
        "llm": demo.llm.model_copy(update={"cache_dir": str(tmp_path / "cache")}),
        # Plain queries (the demo's own run reads scenarios; tests/flows covers that path).
        "synthesis": demo.synthesis.model_copy(update={
            "scenarios": None, "judgements": None, "use_queries": True, "max_combinations": 3,
            "templates_per_query": 1, "work_dir": str(tmp_path / "work")}),
    })
    result = await synthesize(config=config)
    plan = planned(store, config)
    assert len(plan) == 3
    rejects = store.read(result["outputs"]["rejects"])
    # Step-level rejects (a retried step) name the step in their id: ".../step1/attempt0".
    rejected = rejects[~rejects.item_id.str.contains("/step")]
    assert set(rejected.reason) <= REASONS
    # Through datasets, as the next stage reads it (an empty version too: 0 accepted can happen).
    rows = datasets.Dataset(store.read_arrow(store.resolve(result["outputs"]["trajectories"])))
    ids = [r["id"] for r in rows] + list(rejected.item_id)
    assert sorted(ids) == sorted(c.id for c in plan)
    for i, row in enumerate(rows):
        sample = sample_from_trajectory(row, "trajectories@embedded", i)
        assert sample.messages[-1]["role"] == "assistant" and sample.messages[-1]["content"]
        assert all(step["prompt"] and step["completion"] for step in sample.steps)
    summary = {r["metric"]: r["value"] for r in result["summary"]}
    assert summary["trajectories accepted"] + summary["trajectories rejected"] == 3
