"""How collect_queries picks every query's tool subset under the run's runner setting.

With the default runner it is :func:`select_candidates` itself; on processes or Dask the queries
are cut into chunks of ``runner.chunk_size`` and each chunk is one task, which builds its own index
from the :class:`CandidateRetrieval` recipe. Each query's draw is seeded by the run seed and its
id, and the scenario profile is computed once over all queries before chunking, so every runner
chooses the same subsets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from agentune.config.collect_queries import CollectQueriesConfig
from agentune.config.runner import RunnerConfig
from agentune.tasks.common.schemas import QueryView
from agentune.tasks.orchestration.chunk_map import chunk_map, chunked
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.selection import (
    ToolChoice,
    scenario_tool_profile,
    select_tools,
)

ToolSelector = Callable[..., dict[str, ToolChoice]]
"""Picks every query's tool subset: ``select_candidates``, or a chunked run of it."""


def select_candidates(queries: Sequence[QueryView], tools: Sequence[ToolSpec], *,
                      rules: CollectQueriesConfig, seed: int,
                      retrieval: CandidateRetrieval = CandidateRetrieval(),
                      profile: dict[str, list[str]] | None = None) -> dict[str, ToolChoice]:
    """:func:`select_tools` with the catalog indexed by ``retrieval`` (BM25 or hybrid)."""
    return select_tools(queries, tools, rules=rules, seed=seed, profile=profile,
                        retriever=retrieval.index(tools))


def tool_selector(cfg: RunnerConfig) -> ToolSelector:
    """What collect_queries uses to pick tool subsets under this runner setting."""
    if cfg.kind == "default":
        return select_candidates

    def select_in_chunks(queries: Sequence[QueryView], tools: Sequence[ToolSpec], *,
                         rules: CollectQueriesConfig, seed: int,
                         retrieval: CandidateRetrieval = CandidateRetrieval(),
                         ) -> dict[str, ToolChoice]:
        select = partial(select_candidates, tools=list(tools), rules=rules, seed=seed,
                         retrieval=retrieval, profile=scenario_tool_profile(queries))
        merged: dict[str, ToolChoice] = {}
        with chunk_map(cfg) as mapped:
            for choices in mapped(select, chunked(list(queries), cfg.chunk_size)):
                merged.update(choices)
        return merged

    return select_in_chunks
