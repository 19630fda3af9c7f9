"""Candidate tools ranked by BM25 or hybrid wherever a stage chooses them: collect_queries' tool
subsets (also chunked in worker processes, which build their index from the recipe), synthesis'
tool_retrieval combinations, and the tools the closed loop offers under ``max_tools``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.config import RunConfig
from agentune.config.collect_queries import CollectQueriesConfig
from agentune.config.runner import RunnerConfig
from agentune.config.synthesize import SynthesisConfig
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.collect_queries.stage import QueryRecord
from agentune.tasks.collect_queries.tool_subsets import select_candidates, tool_selector
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import OfferedTools
from agentune.tasks.store.artifact_store import ArtifactStore, StoreError
from agentune.tasks.synthesize.sampling import QueryInput, SynthesisInputs, sample_combinations
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval, candidate_retrieval
from agentune.tasks.tool_retrieval.index import HybridRetriever
from agentune.tasks.tools.selection import ToolRetriever

from support.retrieval_cases import demo_records


@pytest.fixture(scope="module")
def hybrid(tiny_folder: Path) -> CandidateRetrieval:
    return CandidateRetrieval(str(tiny_folder))


def test_the_recipe_indexes_bm25_or_hybrid(demo, hybrid) -> None:
    catalog, _ = demo
    assert isinstance(CandidateRetrieval().index(catalog.tools()), ToolRetriever)
    index = hybrid.index(catalog.tools())
    assert isinstance(index, HybridRetriever) and hybrid.name == "hybrid"
    # A request BM25 has no word for still gets candidates: the dense half ranks it.
    assert CandidateRetrieval().index(catalog.tools()).search("§§§ ¶¶", 5) == []
    assert len(index.search("明天成都会下雨吗", 5)) == 5


def test_collect_queries_subsets_follow_the_retrieval_in_every_runner(demo, hybrid) -> None:
    catalog, cases = demo
    # Project records, not test classes: the chunks are pickled to spawned worker processes.
    queries = [QueryRecord(f"q{i}", c.request, c.lang, None, "seed")
               for i, c in enumerate(cases)]
    rules = CollectQueriesConfig(tools_min=6, tools_max=6, hard_distractor_ratio=1.0)
    bm25 = select_candidates(queries, catalog.tools(), rules=rules, seed=0)
    fused = select_candidates(queries, catalog.tools(), rules=rules, seed=0, retrieval=hybrid)
    assert bm25 != fused  # the hard distractors and likely tools come from another ranking
    chunked = tool_selector(RunnerConfig(kind="processes", n_workers=2, chunk_size=10))
    assert chunked(queries, catalog.tools(), rules=rules, seed=0, retrieval=hybrid) == fused


def test_synthesis_tool_retrieval_combinations_follow_the_retrieval(demo, hybrid) -> None:
    catalog, _ = demo
    tools = {t.name: t for t in catalog.tools()}
    names = sorted(tools)
    qs = [QueryInput(f"q{i}", text, "en", f"s{i}", (names[i],), (names[i],))
          for i, text in enumerate(["weather tomorrow in Chengdu", "book a flight to Shanghai",
                                    "convert 5 km to miles", "cancel my hotel booking"])]
    cfg = SynthesisConfig(templates_per_query=1, retrieval_tools=10,
                          task_weights={"tool_retrieval": 1.0})
    planners = {"react": benchmark_template("react")}
    plans = [sample_combinations(SynthesisInputs(qs, tools, planners, retrieval=r), cfg, seed=0)
             for r in (CandidateRetrieval(), hybrid)]
    assert all(c.task_type == "tool_retrieval" for plan in plans for c in plan)
    assert [c.tool_names for c in plans[0]] != [c.tool_names for c in plans[1]]


def test_the_closed_loop_offers_the_best_max_tools_and_ask_user(demo) -> None:
    catalog, _ = demo
    record = next(r for r in demo_records(catalog) if r.scenario.id == "trv-flights-bj-gz")
    everything = OfferedTools(catalog, None, CandidateRetrieval())(record.scenario)
    capped = OfferedTools(catalog, 3, CandidateRetrieval())(record.scenario)
    names = [t["function"]["name"] for t in capped]
    assert len(everything) == len(catalog.offered_tools("travel")) + 1
    best = ToolRetriever(catalog.offered_tools("travel")).search(record.scenario.request, 3)
    assert names[-1] == "ask_user" and set(names[:-1]) == {n for n, _ in best}
    assert 1 <= len(best) <= 3 and "search_flights" in names


def test_a_named_retriever_must_be_published(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    assert candidate_retrieval(store, None) == (CandidateRetrieval(), None)
    with pytest.raises(StoreError, match="retriever"):
        candidate_retrieval(store, "retriever")


@pytest.mark.parametrize("settings, problem", [
    ({"evaluate": {"closed_loop": {"retriever": "retriever"}}}, "only under max_tools"),
    ({"synthesis": {"retriever": "retriever", "distractor_tools": None}}, "needs use_queries"),
    ({"synthesis": {"retriever": "retriever", "scenarios": None, "use_queries": True,
                    "task_weights": {"tool_selection": 1.0}}}, "needs use_queries"),
])
def test_a_retriever_where_it_would_rank_nothing_is_a_config_error(settings, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        RunConfig.model_validate(settings)
    assert RunConfig.model_validate({"evaluate": {"closed_loop": {
        "retriever": "retriever", "max_tools": 5}}, "synthesis": {
        "retriever": "retriever", "use_queries": True}})
    assert RunConfig.model_validate({"synthesis": {"retriever": "retriever"}})  # distractors
