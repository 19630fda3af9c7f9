"""The Dask runner (runner.kind: dask) on a local cluster gives what the default runner gives:
collect_queries publishes the same version ids and rows; near-dup signatures computed on the
workers (Dask's, or a pool of local processes: runner.kind: processes) give the same dedup
outcome as in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from agentune.config import RunConfig
from agentune.config.build_dataset import BuildDatasetConfig
from agentune.config.runner import RunnerConfig
from agentune.flows.collect_queries import collect_queries
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_dataset.dedup import DedupOutcome, deduplicate_samples
from agentune.tasks.orchestration.chunk_map import chunk_map, chunked
from agentune.tasks.store.artifact_store import ArtifactStore

from support.trajectories import make_trajectories, precision_recall, samples_of

DEMO = PROJECT_ROOT / "data" / "demo"


def demo_config(store: Path, runner: dict) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(store)},
        "llm": {"cache": False},
        "queries": {"seed_queries": str(DEMO / "queries.jsonl"), "expand": False},
        "environments": {"catalog": str(DEMO / "tools.yaml")},
        "runner": runner,
    })


def test_chunked_keeps_order_and_remainder() -> None:
    assert chunked([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunked([], 3) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_dask_runner_publishes_the_default_runners_versions(
        tmp_path: Path, prefect_api: None) -> None:
    default = await collect_queries(config=demo_config(tmp_path / "default", {}))
    # chunk_size 16: the demo's queries spread over several tasks on the two workers.
    on_dask = await collect_queries(config=demo_config(
        tmp_path / "dask", {"kind": "dask", "n_workers": 2, "chunk_size": 16}))
    assert not default["reused"] and not on_dask["reused"]
    assert on_dask["outputs"] == default["outputs"]
    a, b = ArtifactStore(tmp_path / "default"), ArtifactStore(tmp_path / "dask")
    for spec in default["outputs"].values():
        assert b.read(spec).equals(a.read(spec)), spec
    queries = a.read(default["outputs"]["queries"])
    assert len(queries) > 16 and queries["tool_ids"].map(len).gt(0).all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dedup_signatures_on_dask_match_in_process(prefect_api: None) -> None:
    gen = make_trajectories(300, exact_dups=20, near_dups=40, seed=3)
    batch_size = 64  # 6 batches: several tasks on the two workers

    def outcome(map_batches) -> DedupOutcome:  # type: ignore[no-untyped-def]
        return deduplicate_samples(samples_of(gen.rows), BuildDatasetConfig(), stage="test",
                                   batch_size=batch_size, map_batches=map_batches)

    @flow
    def dedup_on_dask() -> DedupOutcome:
        with chunk_map(RunnerConfig(kind="dask", n_workers=2)) as mapped:
            return outcome(mapped)

    here, state = outcome(map), dedup_on_dask(return_state=True)
    there = state.result()
    assert [s.id for s in there.kept] == [s.id for s in here.kept]
    assert [(r.item_id, r.reason, r.detail) for r in there.rejects] == \
        [(r.item_id, r.reason, r.detail) for r in here.rejects]
    assert precision_recall(gen, {r.item_id for r in there.rejects}) == (1.0, 1.0)

    async def chunk_runs() -> list[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
        return [run.name for run in runs]

    # One task per batch of 64, shown in the UI under the flow run that mapped them.
    names = asyncio.run(chunk_runs())
    assert len(names) == 6 and all(name.startswith("cpu chunk") for name in names)


def test_dedup_signatures_on_local_processes_match_in_process() -> None:
    gen = make_trajectories(200, exact_dups=10, near_dups=30, seed=4)
    settings, batch_size = BuildDatasetConfig(), 32  # 8 batches over the two processes
    here = deduplicate_samples(samples_of(gen.rows), settings, stage="test",
                               batch_size=batch_size)
    with chunk_map(RunnerConfig(kind="processes", n_workers=2)) as mapped:
        there = deduplicate_samples(samples_of(gen.rows), settings, stage="test",
                                    batch_size=batch_size, map_batches=mapped)
        # The pool's map keeps chunk order and is lazy.
        assert list(mapped(len, iter([[1], [1, 2], [1, 2, 3]]))) == [1, 2, 3]
    assert [s.id for s in there.kept] == [s.id for s in here.kept]
    assert [(r.item_id, r.reason, r.detail) for r in there.rejects] == \
        [(r.item_id, r.reason, r.detail) for r in here.rejects]
    assert precision_recall(gen, {r.item_id for r in there.rejects}) == (1.0, 1.0)
