"""How collect_queries picks every query's tool subset under the run's runner setting.

With the default runner it is :func:`select_tools` itself; on Dask the queries are cut into chunks
of ``runner.chunk_size`` and each chunk is one Prefect task. Each query's draw is seeded by the
run seed and its id, and the scenario profile is computed once over all queries before chunking,
so both runners choose the same subsets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from agentune.config.runner import RunnerConfig
from agentune.tasks.common.schemas import QueryView
from agentune.tasks.orchestration.chunk_map import chunk_map, chunked
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.selection import (
    SelectionRules,
    ToolChoice,
    scenario_tool_profile,
    select_tools,
)

ToolSelector = Callable[..., dict[str, ToolChoice]]
"""Picks every query's tool subset: ``select_tools``, or a chunked run of it on Dask."""


def tool_selector(cfg: RunnerConfig) -> ToolSelector:
    """What collect_queries uses to pick tool subsets under this runner setting."""
    if cfg.kind == "default":
        return select_tools

    def select_in_chunks(queries: Sequence[QueryView], tools: Sequence[ToolSpec], *,
                         rules: SelectionRules, seed: int) -> dict[str, ToolChoice]:
        select = partial(select_tools, tools=list(tools), rules=rules, seed=seed,
                         profile=scenario_tool_profile(queries))
        merged: dict[str, ToolChoice] = {}
        with chunk_map(cfg) as mapped:
            for choices in mapped(select, chunked(list(queries), cfg.chunk_size)):
                merged.update(choices)
        return merged

    return select_in_chunks
