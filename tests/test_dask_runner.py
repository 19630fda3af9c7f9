"""collect_queries on a local Dask cluster (runner.kind: dask) publishes what the default runner
publishes: the same version ids and the same rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentune.flows.collect_queries import collect_queries
from agentune.tasks.store import ArtifactStore
from agentune.tasks.task_runner import chunked

from agentune.config import RunConfig

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


def demo_config(store: Path, runner: dict) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(store)},
        "llm": {"cache": False},
        "queries": {"seed_queries": str(DEMO / "queries.jsonl"),
                    "tool_catalog": str(DEMO / "tools.yaml"), "expand": False},
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
