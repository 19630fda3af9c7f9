"""Tool retrieval on the demo: an encoder trained on the (request, needed tools) pairs of the
scenarios generated from the demo's recipes (train split: train worlds and phrasing families;
embedded model, mean pooling), then recall@5 and MRR of BM25, dense and hybrid on requests never
trained on, each split on its own: the generated held-out ones (unseen worlds and phrasings), the
natural ones (the hand-written scenarios of the training environments) and the reserved ones
(unseen tools), with the catalog grown to 1,000 tools by distractors, zh / en / cross-language
(Chinese requests, English-only catalog); and retrieval latency per query at 1,000 and 10,000
tools. Prints the recall table as a JSON line, then one JSON line with all.

Knobs (environment): AGENTUNE_BENCH_RETRIEVER_BASE (a model folder; default the embedded
model; `none`: BM25 alone, no encoder trained), AGENTUNE_BENCH_RETRIEVER_LAYERS (keep the first N blocks: a faster encoder on a small
CPU), AGENTUNE_BENCH_RETRIEVER_EPOCHS (default 4), AGENTUNE_BENCH_RETRIEVER_LR (default 5e-5),
AGENTUNE_BENCH_RETRIEVAL_SIZES (default 1000,10000), AGENTUNE_BENCH_RETRIEVER_TRAIN (generated
train scenarios, default 2000; the outcome config's scale).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_scenarios.generation import GenerationPlan, generate_scenarios
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord, assign_split, load_scenarios
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.tool_retrieval.distractors import with_distractors
from agentune.tasks.tool_retrieval.encoder import (
    EncoderTraining,
    load_encoder,
    pair_accuracy,
    train_encoder,
)
from agentune.tasks.tool_retrieval.evaluation import score_retrieval
from agentune.tasks.tool_retrieval.index import DenseIndex, HybridRetriever
from agentune.tasks.tool_retrieval.pairs import RetrievalCase, scenario_cases, training_pairs
from agentune.tasks.tools.selection import ToolRetriever
from agentune.tasks.verifier.answers import normalise

from support.retrieval_cases import NOW, demo_catalog

SPLITS = ("heldout", "natural", "reserved")


async def generated_cases(train: int) -> tuple[Any, list[RetrievalCase]]:
    """The demo's generated scenarios (train, heldout 300, reserved 100) and its hand-written
    ones (natural, reserved) as retrieval cases."""
    catalog = demo_catalog()
    written = load_scenarios(PROJECT_ROOT / "data/demo/scenarios.yaml", catalog)
    async with executor_for(catalog, ToolsConfig()) as executor:
        made = await generate_scenarios(catalog, Episode(catalog, executor), GenerationPlan(
            train, 300, 100, seed=0, written=frozenset(normalise(s.request) for s in written)))
    records = [ScenarioRecord(g.scenario, g.split, NOW, {}, {}) for g in made.made]
    records += [ScenarioRecord(s, assign_split(s, catalog, heldout_fraction=0, seed=0,
                                               natural=True), NOW, {}, {}) for s in written]
    return catalog, scenario_cases(records)


def _recall_table(held: list[RetrievalCase], tools: list[Any], encoder: Any) -> dict[str, Any]:
    """recall@5 and MRR per split, condition and retriever, the catalog grown to 1,000 tools."""
    grown = with_distractors(tools, 1000, seed=0)
    table = {}
    for split in SPLITS:
        scores = score_retrieval([c for c in held if c.split == split], grown, encoder,
                                 catalog="1000")
        table |= {f"{split}/{r['condition']}/{r['retriever']}": {
            "n": r["n"], "recall@5": round(r["recall@5"], 3), "mrr": round(r["mrr"], 3),
            "misses@5": r["misses@5"]} for r in scores.rows}
    return table


def _latency(retriever, requests: list[str], repeats: int) -> float:
    """Median milliseconds per single-request search (top 10)."""
    times = []
    for _ in range(repeats):
        for text in requests:
            start = time.perf_counter()
            retriever.search(text, 10)
            times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


@pytest.mark.benchmark
@pytest.mark.timeout(7200)  # the embedded model embeds 10,000 tools on CPU
async def test_retrieval_recall_and_latency(tmp_path: Path) -> None:
    base = os.environ.get("AGENTUNE_BENCH_RETRIEVER_BASE") or str(resolve_model_path("embedded"))
    layers = int(os.environ["AGENTUNE_BENCH_RETRIEVER_LAYERS"]) \
        if os.environ.get("AGENTUNE_BENCH_RETRIEVER_LAYERS") else None
    epochs = float(os.environ.get("AGENTUNE_BENCH_RETRIEVER_EPOCHS", "4"))
    learning_rate = float(os.environ.get("AGENTUNE_BENCH_RETRIEVER_LR", "5e-5"))
    sizes = [int(s) for s in os.environ.get("AGENTUNE_BENCH_RETRIEVAL_SIZES",
                                            "1000,10000").split(",")]
    catalog, cases = await generated_cases(
        int(os.environ.get("AGENTUNE_BENCH_RETRIEVER_TRAIN", "2000")))
    tools = catalog.tools()
    train = [c for c in cases if c.split == "train"]
    held = [c for c in cases if c.split != "train"]
    assert not {c.request for c in train} & {c.request for c in held}
    pairs = training_pairs(train, tools, hard_negatives=1, seed=0)

    if base == "none":  # BM25 alone: no encoder to load or train
        print(json.dumps({"benchmark": "tool_retrieval_recall", "retrievers": ["bm25"],
                          "train_cases": len(train), "train_pairs": len(pairs),
                          "catalog_1000": _recall_table(held, tools, None)}))
        return
    encoder = load_encoder(base, max_seq_length=128, layers=layers)
    before = pair_accuracy(encoder, pairs)
    start = time.perf_counter()
    log = train_encoder(encoder, pairs, tmp_path / "run",
                        EncoderTraining(epochs=epochs, batch_size=16,
                                        learning_rate=learning_rate))
    train_seconds = time.perf_counter() - start
    after = pair_accuracy(encoder, pairs)

    table = _recall_table(held, tools, encoder)
    # Recall first, on its own line: embedding 10,000 tools on a small CPU takes long.
    print(json.dumps({"benchmark": "tool_retrieval_recall", "catalog_1000": table}),
          flush=True)
    latency = {}
    requests = [c.request for c in held if c.split != "heldout"]  # the 66 written ones
    for size in sizes:
        grown = with_distractors(tools, size, seed=0)
        start = time.perf_counter()
        bm25 = ToolRetriever(grown)
        bm25_build = time.perf_counter() - start
        start = time.perf_counter()
        dense = DenseIndex(encoder, grown)
        dense_build = time.perf_counter() - start
        hybrid = HybridRetriever(bm25, dense)
        latency[str(size)] = {
            "bm25_ms": _latency(bm25, requests, 3), "dense_ms": _latency(dense, requests, 1),
            "hybrid_ms": _latency(hybrid, requests, 1),
            "bm25_build_s": round(bm25_build, 2), "dense_build_s": round(dense_build, 1)}

    print(json.dumps({
        "benchmark": "tool_retrieval", "base": Path(base).name, "base_layers": layers,
        "train_pairs": len(pairs), "train_cases": len(train), "eval_cases": len(held),
        "eval_cases_by_split": {s: sum(c.split == s for c in held) for s in SPLITS},
        "eval_zh": sum(c.lang == "zh" for c in held), "epochs": epochs,
        "learning_rate": learning_rate,
        "train_steps": max((e.get("step", 0) for e in log), default=0),
        "train_seconds": round(train_seconds, 1),
        "pair_accuracy_before": round(before, 3), "pair_accuracy_after": round(after, 3),
        "catalog_1000": table, "latency_per_query": latency,
        "cpu_threads": os.environ.get("OMP_NUM_THREADS"),
    }, ensure_ascii=False))
