"""Tool retrieval on the demo: an encoder trained on the train split's pairs (embedded model,
mean pooling), then recall@5 and MRR of BM25, dense and hybrid on the held-out and reserved
scenarios (never trained on) with the catalog grown to 1,000 tools by distractors, zh / en /
cross-language (Chinese requests, English-only catalog); and retrieval latency per query at
1,000 and 10,000 tools. Prints the recall table as a JSON line, then one JSON line with all.

Knobs (environment): AGENTUNE_BENCH_RETRIEVER_BASE (a model folder; default the embedded
model), AGENTUNE_BENCH_RETRIEVER_LAYERS (keep the first N blocks: a faster encoder on a small
CPU), AGENTUNE_BENCH_RETRIEVER_EPOCHS (default 4), AGENTUNE_BENCH_RETRIEVER_LR (default 5e-5),
AGENTUNE_BENCH_RETRIEVAL_SIZES (default 1000,10000).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.retrieval.distractors import with_distractors
from agentune.tasks.retrieval.encoder import (
    EncoderTraining,
    load_encoder,
    pair_accuracy,
    train_encoder,
)
from agentune.tasks.retrieval.evaluation import score_retrieval
from agentune.tasks.retrieval.index import DenseIndex, HybridRetriever
from agentune.tasks.retrieval.pairs import training_pairs
from agentune.tasks.tools.selection import ToolRetriever

from support.retrieval_cases import demo_cases


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
def test_retrieval_recall_and_latency(tmp_path: Path) -> None:
    base = os.environ.get("AGENTUNE_BENCH_RETRIEVER_BASE") or str(resolve_model_path("embedded"))
    layers = int(os.environ["AGENTUNE_BENCH_RETRIEVER_LAYERS"]) \
        if os.environ.get("AGENTUNE_BENCH_RETRIEVER_LAYERS") else None
    epochs = float(os.environ.get("AGENTUNE_BENCH_RETRIEVER_EPOCHS", "4"))
    learning_rate = float(os.environ.get("AGENTUNE_BENCH_RETRIEVER_LR", "5e-5"))
    sizes = [int(s) for s in os.environ.get("AGENTUNE_BENCH_RETRIEVAL_SIZES",
                                            "1000,10000").split(",")]
    catalog, cases = demo_cases()
    tools = catalog.tools()
    train = [c for c in cases if c.split == "train"]
    held = [c for c in cases if c.split != "train"]
    assert not {c.request for c in train} & {c.request for c in held}
    pairs = training_pairs(train, tools, hard_negatives=1, seed=0)

    encoder = load_encoder(base, max_seq_length=128, layers=layers)
    before = pair_accuracy(encoder, pairs)
    start = time.perf_counter()
    log = train_encoder(encoder, pairs, tmp_path / "run",
                        EncoderTraining(epochs=epochs, batch_size=16,
                                        learning_rate=learning_rate))
    train_seconds = time.perf_counter() - start
    after = pair_accuracy(encoder, pairs)

    scores = score_retrieval(held, with_distractors(tools, 1000, seed=0), encoder,
                             catalog="1000")
    table = {f"{r['condition']}/{r['retriever']}": {
        "n": r["n"], "recall@5": round(r["recall@5"], 3), "mrr": round(r["mrr"], 3),
        "misses@5": r["misses@5"]} for r in scores.rows}

    # Recall first, on its own line: embedding 10,000 tools on a small CPU takes long.
    print(json.dumps({"benchmark": "tool_retrieval_recall", "catalog_1000": table}),
          flush=True)
    latency = {}
    requests = [c.request for c in held]
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
        "eval_zh": sum(c.lang == "zh" for c in held), "epochs": epochs,
        "learning_rate": learning_rate,
        "train_steps": max((e.get("step", 0) for e in log), default=0),
        "train_seconds": round(train_seconds, 1),
        "pair_accuracy_before": round(before, 3), "pair_accuracy_after": round(after, 3),
        "catalog_1000": table, "latency_per_query": latency,
        "cpu_threads": os.environ.get("OMP_NUM_THREADS"),
    }, ensure_ascii=False))
