"""The synthesize stage flow with a scripted teacher and judge on a real OpenAI-compatible test
server: it publishes `trajectories` and `rejects` that account for every combination, the
trajectories read with pandas and datasets and pass the dataset stage's row checks, their
messages go through TRL's SFTTrainer data preparation, a progress artifact shows the run, and a
re-run reuses the published versions without asking the teacher anything.

The scripted teacher and the inputs are in tests/support/synthesis_inputs.py, shared with the
kill-and-resume test."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pytest

from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.build_dataset.samples import sample_from_trajectory
from agentune.tasks.common.schemas import TRAJECTORY_FEATURES
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint

from support.openai_server import OpenAITestServer
from support.synthesis_inputs import (
    CATALOG,
    PLANS,
    ScriptedTeacher,
    planned,
    publish_inputs,
    run_config,
)


def test_the_script_recognises_every_template() -> None:
    """Guards the helper the flow tests rely on: each template's prompt is answered in its own
    format (a planner prompt without the query's memory gets the first call)."""
    from agentune.tasks.agent.prompt_templates import AgentPromptInputs

    for name, marker in (("kuaiagent", '"task_name"'), ("autogpt", '"thoughts"'),
                         ("react", "Action: calculator")):
        prompt = benchmark_template(name).render(AgentPromptInputs.for_query(
            PLANS["q-mul"].text, [CATALOG["calculator"].to_row()],
            current_time=pd.Timestamp("2025-06-02T09:30+08:00").to_pydatetime()))
        reply = ScriptedTeacher().reply({"messages": [{"role": "user", "content": prompt}]})
        assert marker in (reply.content or "") and "17*23" in (reply.content or "")


@pytest.fixture(scope="module")
def published(prefect_api: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from agentune.flows.synthesize import synthesize

    root = tmp_path_factory.mktemp("synthesize")
    store = publish_inputs(root / "store")
    with OpenAITestServer(ScriptedTeacher()) as server:
        config = run_config(root, server)
        result = asyncio.run(synthesize(config=config))
        yield store, config, server, result


def test_trajectories_and_rejects_account_for_every_combination(published: Any) -> None:
    store, config, server, result = published
    assert not result["reused"] and set(result["outputs"]) == {"trajectories", "attempts", "rejects"}
    plan = planned(store, config)
    assert len(plan) == 2 * len(PLANS)
    folder = store.version_dir(store.resolve(result["outputs"]["trajectories"]))
    frame = pd.read_parquet(folder)
    assert list(frame.columns) == list(TRAJECTORY_FEATURES)
    rejects = store.read(result["outputs"]["rejects"])
    trajectory_rejects = rejects[~rejects.item_id.str.contains("/step")]
    seen = list(frame.id) + list(trajectory_rejects.item_id)
    assert sorted(seen) == sorted(c.id for c in plan)  # each exactly once
    assert set(trajectory_rejects.reason) == {"unneeded_tool_call"}
    assert set(trajectory_rejects.item_id) == {c.id for c in plan if c.query_id == "q-joke"}
    # q-pow's first calculator step is asked again under every template; recorded as step rejects.
    step_rejects = rejects[rejects.item_id.str.contains("/step")]
    assert set(step_rejects.reason) == {"step_invalid_args"}
    assert len(step_rejects) == 2 and step_rejects.detail.str.contains("expr").all()
    assert frame.judge_score.eq(8).all() and (frame.teacher_model == "test-model").all()
    assert set(frame.task_type) == {"tool_selection", "multi_step_planning", "timing_decision",
                                    "tool_retrieval"}

    ds = datasets.load_dataset("parquet", data_dir=str(folder))["train"]
    samples = [sample_from_trajectory(r, "trajectories@test", i) for i, r in enumerate(ds)]
    multi = next(s for s in samples if s.query_id == "q-km")
    calls = [c["function"] for m in multi.messages for c in m.get("tool_calls") or []]
    assert [c["name"] for c in calls] == ["unit_convert", "calculator"]
    assert calls[0]["arguments"] == {"value": 42, "from_unit": "km", "to_unit": "mi"}
    rain = next(s for s in samples if s.query_id == "q-rain")
    tool_message = next(m for m in rain.messages if m["role"] == "tool")
    assert json.loads(tool_message["content"])["condition"] == "dry"  # the simulated API
    for sample in samples:
        assert [s["step"] for s in sample.steps] == list(range(len(sample.steps)))
        kinds = {s["kind"] for s in sample.steps}
        assert kinds <= {"plan", "conclude"}
        assert ("conclude" in kinds) == (sample.template_id == "bench-kuaiagent")

    summary = {r["metric"]: r["value"] for r in result["summary"]}
    assert summary["trajectories accepted"] == len(frame)
    assert summary["rejected: unneeded_tool_call"] == 2
    assert summary["step answers dropped: invalid_args"] == 2
    # The checkpoint folder goes once the version is published.
    assert not (Path(config.synthesis.work_dir)).exists() or not any(
        Path(config.synthesis.work_dir).iterdir())


def test_rerun_reuses_the_versions_without_asking_the_teacher(published: Any) -> None:
    from agentune.flows.synthesize import synthesize

    store, config, server, result = published
    before = len(server.requests)
    again = asyncio.run(synthesize(config=config))
    assert again["reused"] and again["outputs"] == result["outputs"]
    assert len(server.requests) == before


def test_progress_artifact_shows_the_finished_run(published: Any) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["synthesize-progress"])))

    artifacts = asyncio.run(read())
    assert artifacts and max(float(a.data) for a in artifacts) == 100.0
    assert any(re.search(r"12/12 trajectories", a.description or "") for a in artifacts)


def test_messages_go_through_sft_trainer_data_preparation(published: Any, tmp_path: Path) -> None:
    from agentune.tasks.common.chat_audit import ChatAuditor
    from agentune.tasks.llm.embedded_model import resolve_model_path

    from support.tiny_models import sft_trainer_for
    from support.tiny_student import make_tiny_student

    store, _, _, result = published
    folder = store.version_dir(store.resolve(result["outputs"]["trajectories"]))
    train = datasets.load_dataset("parquet", data_dir=str(folder))["train"]
    train = train.select_columns(["messages", "tools"])
    template = ChatAuditor(resolve_model_path("embedded"), max_length=4096).template
    trainer = sft_trainer_for(make_tiny_student(tmp_path / "tiny"), template, train,
                              tmp_path / "out")
    tokenizer = trainer.processing_class
    prepared = trainer.train_dataset
    assert len(prepared) == len(train) > 0
    for row in prepared:
        assert sum(label != -100 for label in row["labels"]) > 0  # assistant tokens are trained
    text = tokenizer.decode(prepared[0]["input_ids"])
    assert "Oslo" in text or "17*23" in text or "Bonjour" in text or "2**10" in text or \
        "42" in text


def test_checkpoint_drops_a_torn_last_line(tmp_path: Path) -> None:
    from agentune.tasks.synthesize.checkpoint import CheckpointError, CheckpointRecord

    checkpoint = SynthesisCheckpoint(tmp_path / "v1")
    checkpoint.append(CheckpointRecord("a", True, {"id": "a"}, [], {"calls": 1}))
    checkpoint.append(CheckpointRecord("b", False, None, [{"reason": "step_cap"}], {}))
    with checkpoint.path.open("ab") as fh:
        fh.write(b'{"id": "c", "accep')  # killed mid-write
    assert list(checkpoint.load()) == ["a", "b"]
    assert checkpoint.path.read_bytes().endswith(b"}\n")
    checkpoint.append(CheckpointRecord("c", True, {"id": "c"}))
    assert list(checkpoint.load()) == ["a", "b", "c"]
    assert len(checkpoint.path.read_bytes().splitlines()) == 3
    checkpoint.path.write_text('{"id": "a"}\n')
    with pytest.raises(CheckpointError, match=r"checkpoint.jsonl: line 1: unreadable"):
        checkpoint.load()


def test_synthesize_follows_the_templates_in_the_pipeline() -> None:
    from agentune.flows import RUNNABLE
    from agentune.flows.pipeline import STAGES

    assert list(STAGES)[:5] == ["collect_queries", "build_scenarios", "build_templates",
                                "synthesize", "build_dataset"]
    assert "synthesize" in RUNNABLE
