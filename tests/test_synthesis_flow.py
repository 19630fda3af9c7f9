"""The synthesize stage flow with a scripted teacher and judge on a real OpenAI-compatible test
server: it publishes `trajectories` and `rejects` that account for every combination, the
trajectories read with pandas and datasets and pass the dataset stage's row checks, their
messages go through TRL's SFTTrainer data preparation, a progress artifact shows the run, and a
re-run reuses the published versions without asking the teacher anything.

``ScriptedTeacher``, ``publish_inputs`` and ``run_config`` are shared with the kill-and-resume
test (tests/test_synthesis_resume.py)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pytest

from agentune.config import RunConfig
from agentune.tasks.dataset_samples import sample_from_trajectory
from agentune.tasks.prompt_templates import BENCHMARKS, benchmark_id, benchmark_template
from agentune.tasks.query_collection import QUERY_FEATURES, TOOL_FEATURES
from agentune.tasks.schemas import TRAJECTORY_FEATURES
from agentune.tasks.store import ArtifactStore
from agentune.tasks.synthesis_checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesis_sampling import (
    SynthesisInputs,
    read_catalog,
    read_queries,
    read_templates,
    sample_combinations,
)
from agentune.tasks.template_building import TEMPLATE_FEATURES
from agentune.tasks.tool_catalog import load_tool_catalog
from agentune.paths import PROJECT_ROOT
from support.openai_server import Action, Hang, OpenAITestServer, Reply

CATALOG = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}
TOOL_NAMES = ("calculator", "unit_convert", "get_weather", "date_calculate")


@dataclass(frozen=True)
class Plan:
    """What the scripted teacher does for a query: the calls, in order, then the answer."""

    text: str
    likely: tuple[str, ...]
    calls: tuple[tuple[str, dict[str, Any]], ...]
    answer: str


PLANS = {
    "q-mul": Plan("What is 17 times 23?", ("calculator",),
                  (("calculator", {"expression": "17*23"}),), "17 times 23 is 391."),
    "q-pow": Plan("Compute 2 to the power of 10.", ("calculator",),
                  (("calculator", {"expression": "2**10"}),), "2 to the power of 10 is 1024."),
    "q-rain": Plan("Will it rain in Oslo tomorrow?", ("get_weather",),
                   (("get_weather", {"location": "Oslo", "date": "2025-06-03"}),),
                   "Tomorrow Oslo stays dry."),
    "q-km": Plan("How many miles are 42 km, and what is twice that?",
                 ("unit_convert", "calculator"),
                 (("unit_convert", {"value": 42, "from_unit": "km", "to_unit": "mi"}),
                  ("calculator", {"expression": "26.0976*2"})), "42 km is 26.1 miles; twice "
                 "that is 52.2 miles."),
    "q-hello": Plan("Say hello in French.", (), (), "Bonjour !"),
    # The teacher calls a tool for a query that needs none: rejected (unneeded_tool_call).
    "q-joke": Plan("Tell me a short joke about cats.", (),
                   (("calculator", {"expression": "9*9"}),), "Cats have nine lives."),
}


def publish_inputs(root: Path) -> ArtifactStore:
    store = ArtifactStore(root)
    queries = [{"id": qid, "text": p.text, "lang": "en", "set_id": "set-en-000", "source": "seed",
                "parent_ids": [], "scenario": "mixed",
                "tool_ids": list(dict.fromkeys(p.likely + ("calculator", "date_calculate"))),
                "pii_placeholders": [], "likely_tool_ids": list(p.likely),
                "tool_hints": list(p.likely)} for qid, p in PLANS.items()]
    store.publish("queries", queries, features=QUERY_FEATURES)
    store.publish("tools", [CATALOG[n].to_row() for n in TOOL_NAMES], features=TOOL_FEATURES)
    rows = []
    for name in ("kuaiagent", "kuaiagent_concluder", "react", "autogpt"):
        spec, template = BENCHMARKS[name], benchmark_template(name)
        rows.append({"id": benchmark_id(name), "source": "benchmark", "kind": spec.kind,
                     "set_id": None, "name": name, "lang": spec.lang, "protocol": spec.protocol,
                     "text": template.text, "sections": {}, "style": None, "score": None,
                     "n_instances": 0, "n_kept_instances": None, "kept": True, "reason": None,
                     "detail": ""})
    dropped = dict(rows[-1], id="tpl-dropped", source="meta-agent", kept=False,
                   reason="below_threshold")
    store.publish("templates", rows + [dropped], features=TEMPLATE_FEATURES)
    return store


def run_config(root: Path, server: OpenAITestServer, **synthesis: Any) -> RunConfig:
    role = {"provider": "openai", "model": "test-model", "base_url": server.base_url,
            "max_retries": 0, "max_concurrency": 4}
    return RunConfig.model_validate({
        "store": {"root": str(root / "store")},
        "llm": {"teacher": role, "judge": role, "cache_dir": str(root / "cache")},
        "synthesis": {"templates_per_query": 2, "judge": True, "min_judge_score": 6.0,
                      "concurrency": 3, "work_dir": str(root / "work"),
                      "tools": {"simulation": {"error_rate": 0.0}}, **synthesis},
    })


def planned(store: ArtifactStore, config: RunConfig) -> list[Any]:
    cfg = config.synthesis
    tools = read_catalog(store.read(cfg.catalog), "tools")
    inputs = SynthesisInputs(read_queries(store.read(cfg.queries), "queries", tools), tools,
                             read_templates(store.read(cfg.templates), "templates"))
    return sample_combinations(inputs, cfg, seed=config.seed)


class ScriptedTeacher:
    """Answers by what a request is: a simulated API, the judge, a concluder, or a planning
    step in KuaiAgent, AutoGPT or ReAct. A planning step makes the query's next call not yet in
    the prompt's memory, then finishes. Calculator calls for q-pow first name a wrong argument
    (asked again: the retry request carries the problem). ``hang_at``: that request (by arrival
    number) hangs until the server stops."""

    def __init__(self, hang_at: int | None = None) -> None:
        self.hang_at = hang_at

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        reply = self.reply(body)
        if self.hang_at is not None and n == self.hang_at:
            return Hang(600, reply)
        return reply

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        first = messages[0]["content"]
        schema_name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if first.startswith("You are the server behind a web API"):
            return Reply(json.dumps({"response": {"location": "Oslo", "rain_mm": 0,
                                                  "condition": "dry"}}))
        if schema_name == "answer_judgement":
            return Reply(json.dumps({"rationale": "grounded", "score": 8}))
        plan = next(p for p in PLANS.values() if p.text in first)
        if "Write a helpful answer for the user:" in first:
            return Reply(plan.answer)
        todo = [(tool, args) for tool, args in plan.calls
                if str(next(iter(args.values()))) not in first.split(plan.text, 1)[1]]
        retried = len(messages) > 1
        if todo and plan is PLANS["q-pow"] and not retried:
            todo = [("calculator", {"expr": "2**10"})]
        if "task_complete" in first:
            tool, args = todo[0] if todo else ("task_complete", {})
            return Reply(json.dumps({"task_name": f"use {tool}",
                                     "command": {"name": tool, "args": args}}))
        if '"thoughts"' in first:
            tool, args = todo[0] if todo else ("finish", {"response": plan.answer})
            return Reply(json.dumps({"thoughts": {"text": f"use {tool}"},
                                     "command": {"name": tool, "args": args}}))
        if todo:
            tool, args = todo[0]
            return Reply(f"Thought: use {tool}\nAction: {tool}\nAction Input: {json.dumps(args)}")
        return Reply(f"Thought: I now know the final answer\nFinal Answer: {plan.answer}")


def test_the_script_recognises_every_template() -> None:
    """Guards the helper the flow tests rely on: each template's prompt is answered in its own
    format (a planner prompt without the query's memory gets the first call)."""
    from agentune.tasks.prompt_templates import AgentPromptInputs

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
    assert not result["reused"] and set(result["outputs"]) == {"trajectories", "rejects"}
    plan = planned(store, config)
    assert len(plan) == 2 * len(PLANS)
    folder = store.version_dir(store.resolve(result["outputs"]["trajectories"]))
    frame = pd.read_parquet(folder)
    assert list(frame.columns) == list(TRAJECTORY_FEATURES)
    rejects = store.read(result["outputs"]["rejects"])
    trajectory_rejects = rejects[~rejects.reason.str.startswith("step_")]
    seen = list(frame.id) + list(trajectory_rejects.item_id)
    assert sorted(seen) == sorted(c.id for c in plan)  # each exactly once
    assert set(trajectory_rejects.reason) == {"unneeded_tool_call"}
    assert set(trajectory_rejects.item_id) == {c.id for c in plan if c.query_id == "q-joke"}
    # q-pow's first calculator step is asked again under every template; recorded as step rejects.
    step_rejects = rejects[rejects.reason.str.startswith("step_")]
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
    from agentune.tasks.dataset_audit import ChatAuditor
    from agentune.tasks.embedded_model import resolve_model_path
    from support.tiny_models import sft_trainer_for
    from test_mixing import make_tiny_student

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
    from agentune.tasks.synthesis_checkpoint import CheckpointError, CheckpointRecord

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


def test_synthesize_is_the_third_stage_of_the_pipeline() -> None:
    from agentune.flows import RUNNABLE
    from agentune.flows.pipeline import STAGES

    assert list(STAGES)[:4] == ["collect_queries", "build_templates", "synthesize",
                                "build_dataset"]
    assert "synthesize" in RUNNABLE
