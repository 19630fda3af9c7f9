"""The train_retriever stage flow on a published scenarios version with a tiny random encoder:
pairs from the train split only, a `retriever` version (pairs, encoder folder, card), reuse on a
re-run; the evaluate stage's retrieval table then compares BM25, dense and hybrid with it, and
collect_queries named to it picks its tool subsets by hybrid ranking (the retriever a parent)."""

from __future__ import annotations

from pathlib import Path

from agentune.config import RunConfig
from agentune.flows.collect_queries import collect_queries
from agentune.flows.train_retriever import train_retriever
from agentune.tasks.evaluate.benchmarks.tool_retrieval.benchmark import evaluate_retrieval
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.tool_retrieval.encoder import load_encoder

from support.retrieval_cases import (
    DEMO,
    demo_cases,
    demo_records,
    publish_scenarios,
    tiny_encoder_folder,
)


def _config(tmp_path: Path, tiny: Path) -> RunConfig:
    return RunConfig.model_validate({
        "store": {"root": str(tmp_path / "store")},
        "environments": {"catalog": str(DEMO / "tools.yaml")},
        "train_retriever": {"base_model": str(tiny), "max_steps": 3, "batch_size": 8,
                            "learning_rate": 1e-3, "work_dir": str(tmp_path / "runs")},
        "evaluate": {"retrieval": {"catalog_sizes": [120]}},
    })


async def test_train_retriever_publishes_and_the_report_compares(prefect_api, tmp_path) -> None:
    catalog, cases = demo_cases()
    tiny = tiny_encoder_folder(tmp_path / "tiny", catalog, cases)
    config = _config(tmp_path, tiny)
    store = ArtifactStore(config.store.root)
    publish_scenarios(store, catalog)

    result = await train_retriever(config=config)
    assert not result["reused"] and result["outputs"]["retriever"].startswith("retriever@")
    manifest = store.manifest("retriever")
    pairs = store.read("retriever")
    held = {r.scenario.request for r in demo_records(catalog) if r.split != "train"}
    assert len(pairs) == manifest.rows > 0 and not set(pairs["anchor"]) & held
    assert {"both", "en"} == set(pairs["view"])
    assert manifest.parents and manifest.parents[0]["name"] == "scenarios"
    card = store.file("retriever", "README.md").read_text("utf-8")
    assert "MultipleNegativesRankingLoss" in card and "After training" in card
    encoder = load_encoder(store.file("retriever", "encoder"))
    assert encoder.encode(["明天成都会下雨吗"]).shape[0] == 1
    assert (await train_retriever(config=config))["reused"]

    evaluation = evaluate_retrieval(config, store)
    assert evaluation is not None and not evaluation.skipped
    assert [p.name for p in evaluation.parents] == ["scenarios", "retriever"]
    keys = {(r["catalog"], r["condition"], r["retriever"]) for r in evaluation.scores.rows}
    assert keys == {(c, cond, r) for c in ("as written", "+distractors (120)")
                    for cond in ("all", "zh", "en", "cross")
                    for r in ("bm25", "dense", "hybrid")}
    assert all(r["tools"] == 120 for r in evaluation.scores.rows
               if r["catalog"].startswith("+"))
    rows = evaluation.report_rows()
    assert {r["suite"] for r in rows} == {"retrieval:as written", "retrieval:+distractors (120)"}
    assert "| cross | hybrid |" in evaluation.markdown()


async def test_collect_queries_ranks_candidate_tools_with_a_named_retriever(prefect_api,
                                                                          tmp_path) -> None:
    catalog, cases = demo_cases()
    tiny = tiny_encoder_folder(tmp_path / "tiny", catalog, cases)
    config = _config(tmp_path, tiny)
    store = ArtifactStore(config.store.root)
    publish_scenarios(store, catalog)
    retriever = (await train_retriever(config=config))["outputs"]["retriever"]

    subsets = {}
    for named in (None, "retriever"):
        run = config.merged(queries={"expand": False, "retriever": named,
                                     "hard_distractor_ratio": 1.0})
        queries = (await collect_queries(config=run))["outputs"]["queries"]
        parents = [f"{p['name']}@{p['version']}" for p in store.manifest(queries).parents]
        assert parents == ([retriever] if named else [])
        subsets[named] = list(store.read(queries)["tool_ids"].map(tuple))
    assert subsets[None] != subsets["retriever"]
