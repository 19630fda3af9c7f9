"""Scale-out: the CPU-bound work of a stage mapped over chunks on Dask (``RunConfig.runner``).

A stage hands its CPU-bound step to a :data:`ChunkMap`, an ordered, lazy ``map`` over chunks:
the builtin ``map`` with the default runner, a pool of local processes (``runner.kind:
processes``, ``runner.n_workers`` of them), or one Prefect task per chunk on prefect-dask's
``DaskTaskRunner`` (the cluster at ``runner.address``, or a local cluster of ``runner.n_workers``
processes started for the stage) with ``runner.kind: dask``. The mapped functions are pure
(each chunk's result depends only on the chunk and the arguments bound into the function), so
the published versions are the same under both runners. Mapped now:

- collect_queries: tool selection (BM25 retrieval and the seeded subset draw of every query);
- build_dataset: MinHash signatures for near-dup detection (shingling + ``MinHash.bulk``); the
  LSH index itself stays in the flow's process (or in Redis), fed in input order.
"""

from __future__ import annotations

import contextvars
import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext
from prefect_dask import DaskTaskRunner
from prefect_dask.task_runners import PrefectDaskFuture

from agentune.config.runner import RunnerConfig

T = TypeVar("T")
R = TypeVar("R")

ChunkMap = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]
"""``(fn, chunks) -> results``: ``fn`` applied to every chunk, results in chunk order, lazily."""


def dask_task_runner(cfg: RunnerConfig) -> DaskTaskRunner:
    """An existing cluster when an address is given, else a local cluster of processes."""
    if cfg.address:
        return DaskTaskRunner(address=cfg.address)
    return DaskTaskRunner(cluster_kwargs={
        "n_workers": cfg.n_workers,
        "threads_per_worker": cfg.threads_per_worker,
        "processes": True,
        "dashboard_address": None,  # no web dashboard port for a throwaway cluster
    })


def chunked(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


# No retries: the inputs are already validated, so a failure here would fail again. No cache:
# a cache key would hash every chunk's whole input for nothing.
@task(name="cpu chunk", cache_policy=NO_CACHE)
def run_chunk(fn: Callable[[Any], Any], chunk: Any) -> Any:
    return fn(chunk)


@contextmanager
def chunk_map(cfg: RunnerConfig) -> Iterator[ChunkMap]:
    """The stage's :data:`ChunkMap` under this runner setting; a Dask runner lives as long as
    the ``with`` block, so one stage's several maps share one cluster."""
    if cfg.kind == "default":
        yield map
        return
    if cfg.kind == "processes":
        # Spawned, not forked: the flow's process has threads (Prefect, the gateway), and a
        # fork copies whatever locks they hold.
        with ProcessPoolExecutor(max_workers=cfg.n_workers,
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            yield partial(_map_on_pool, pool, 2 * cfg.n_workers)
        return
    # Submissions run in a copy of the caller's context without its task-run context: Prefect
    # ships the submitting context to the workers, and a stage's task context holds parameters
    # such as the run's store and LLM cache (sqlite connections, which cannot be pickled). The
    # flow-run context stays, so every chunk shows as a task of the stage's flow run; the
    # settings context stays, so workers report to the same Prefect API.
    context = contextvars.copy_context()
    context.run(TaskRunContext.__var__.set, None)  # type: ignore[arg-type]
    runner = dask_task_runner(cfg)
    context.run(runner.__enter__)
    try:
        # Two chunks per worker thread in flight: each thread has the next one at hand.
        threads = sum(runner.client.nthreads().values())
        yield partial(_map_on_dask, context, runner, max(2, 2 * threads))
    finally:
        context.run(runner.__exit__, None, None, None)


def _map_on_pool(pool: ProcessPoolExecutor, window: int, fn: Callable[[Any], R],
                 chunks: Iterable[Any]) -> Iterator[R]:
    """At most ``window`` chunks in flight on the pool, results in chunk order."""
    pending: deque[Future[R]] = deque()
    try:
        for chunk in chunks:
            pending.append(pool.submit(fn, chunk))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def _map_on_dask(context: contextvars.Context, runner: DaskTaskRunner, window: int,
                 fn: Callable[[Any], R], chunks: Iterable[Any]) -> Iterator[R]:
    """At most ``window`` chunks in flight, so a long stream never sits in memory at once."""
    pending: deque[PrefectDaskFuture[R]] = deque()
    try:
        for chunk in chunks:
            pending.append(context.run(runner.submit, run_chunk,
                                       {"fn": fn, "chunk": chunk}))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:  # the consumer stopped early or a chunk failed
            future.wrapped_future.cancel()
