"""Where the CPU-bound work of a stage runs: in process, on local processes or on Dask."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentune.config.strict import Strict


class RunnerConfig(Strict):
    """Where the CPU-bound work of a stage runs (tool selection of collect_queries, near-dup
    signatures of build_dataset): in the flow's process, mapped over chunks on local worker
    processes, or on a Dask cluster through prefect-dask."""

    kind: Literal["default", "processes", "dask"] = Field(
        "default", description="`default`: in process. `processes`: a pool of `n_workers` "
        "local processes (uses the other cores of one machine; build_dataset signs near-dup "
        "texts there while it computes exact keys). `dask`: prefect-dask's DaskTaskRunner."
    )
    address: str | None = Field(
        None, description="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786. "
        "Unset: a local cluster for the run.",
    )
    n_workers: int = Field(
        2, ge=1, le=1024, description="Workers of the local process pool or Dask cluster.")
    threads_per_worker: int = Field(1, ge=1, le=256, description="Threads per local worker.")
    chunk_size: int = Field(
        256, ge=1, le=1_000_000, description="Queries per tool-selection task on Dask (near-dup "
        "signatures go 2,048 samples a task)."
    )
