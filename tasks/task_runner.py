"""Scale-out: the CPU-bound work of a stage mapped over chunks on Dask (``RunConfig.runner``).

With ``runner.kind: dask`` the tool selection of collect_queries runs as Prefect tasks, one per
chunk of queries, on prefect-dask's ``DaskTaskRunner``: on the cluster at ``runner.address``, or on
a local cluster of ``runner.n_workers`` processes started for the run. Each query's choice depends
only on the query, the catalog, the seed and the scenario profile (computed once over all queries
here, before chunking), so the published version is the same as with the default runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agentune.tasks.query_collection import ToolSelector
from agentune.tasks.tool_catalog import ToolSpec
from agentune.tasks.tool_selection import (
    SelectionQuery,
    SelectionRules,
    ToolChoice,
    scenario_tool_profile,
    select_tools,
)
from prefect import flow, task, unmapped
from prefect_dask import DaskTaskRunner

from agentune.config import RunnerConfig

T = TypeVar("T")


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


@task(name="select tools (chunk)")
def select_tools_chunk(queries: list[Any], tools: list[ToolSpec],
                       rules: SelectionRules, seed: int,
                       profile: dict[str, list[str]]) -> dict[str, ToolChoice]:
    # No retries: the inputs are already validated, so a failure here would fail again.
    return select_tools(queries, tools, rules=rules, seed=seed, profile=profile)


# The queries are typed Any in the task and flow signatures: Prefect builds a parameter schema
# from them, and a Protocol (SelectionQuery) cannot be one. Validation is off: the chunks are
# dataclasses the flow hands on as they are.
@flow(name="select tools on dask", validate_parameters=False)
def select_tools_mapped(chunks: list[list[Any]], tools: list[ToolSpec],
                        rules: SelectionRules, seed: int,
                        profile: dict[str, list[str]]) -> dict[str, ToolChoice]:
    futures = select_tools_chunk.map(chunks, unmapped(tools), unmapped(rules), unmapped(seed),
                                     unmapped(profile))
    merged: dict[str, ToolChoice] = {}
    for future in futures:
        merged.update(future.result())
    return merged


def tool_selector(cfg: RunnerConfig) -> ToolSelector:
    """What collect_queries uses to pick tool subsets under this runner setting."""
    if cfg.kind == "default":
        return select_tools

    def select_on_dask(queries: Sequence[SelectionQuery], tools: Sequence[ToolSpec], *,
                       rules: SelectionRules, seed: int) -> dict[str, ToolChoice]:
        profile = scenario_tool_profile(queries)
        mapped = select_tools_mapped.with_options(task_runner=dask_task_runner(cfg))
        # A fresh thread starts with an empty context: the Dask runner ships the caller's Prefect
        # context to the workers, and the calling task's context holds the run's store and LLM
        # cache (sqlite connections, which cannot be pickled). So the mapped flow runs as a flow
        # run of its own rather than as a child of the stage's task.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentune-dask") as pool:
            return pool.submit(mapped, chunked(list(queries), cfg.chunk_size), list(tools),
                               rules, seed, profile).result()

    return select_on_dask
