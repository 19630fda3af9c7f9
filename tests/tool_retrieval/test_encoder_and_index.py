"""The encoder and the indexes with a tiny random model: a few training steps make it rank its
training positives above BM25's hard negatives more often than before; the dense index searches
exactly (FAISS flat); the hybrid index returns the reciprocal-rank union of BM25 and dense;
the evaluation scores every retriever per condition and lists the misses."""

from __future__ import annotations

import numpy as np
import pytest

from agentune.tasks.tool_retrieval.documents import tool_text
from agentune.tasks.tool_retrieval.encoder import (
    EncoderTraining,
    load_encoder,
    pair_accuracy,
    train_encoder,
)
from agentune.tasks.tool_retrieval.evaluation import score_retrieval
from agentune.tasks.tool_retrieval.index import DenseIndex, HybridRetriever, reciprocal_rank_fusion
from agentune.tasks.tool_retrieval.pairs import training_pairs
from agentune.tasks.tools.selection import ToolRetriever


def test_reciprocal_rank_fusion_by_hand() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "d"]], k=1)
    # a: 1/2; b: 1/3; c: 1/4 + 1/2 = 3/4; d: 1/3 -> c, a, then b and d tied (by name)
    assert [n for n, _ in fused] == ["c", "a", "b", "d"]
    assert dict(fused) == pytest.approx({"a": 0.5, "b": 1 / 3, "c": 0.75, "d": 1 / 3})
    assert reciprocal_rank_fusion([[], []]) == []


def test_training_ranks_positives_above_hard_negatives_more_often(tiny_folder, demo, tmp_path
                                                                   ) -> None:
    catalog, cases = demo
    pairs = training_pairs([c for c in cases if c.split == "train"], catalog.tools(), seed=0)
    encoder = load_encoder(tiny_folder, max_seq_length=96)
    before = pair_accuracy(encoder, pairs)
    log = train_encoder(encoder, pairs, tmp_path / "run",
                        EncoderTraining(max_steps=30, batch_size=16, learning_rate=3e-3,
                                        warmup_ratio=0.0))
    after = pair_accuracy(encoder, pairs)
    losses = [e["loss"] for e in log if "loss" in e]
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert after > before + 0.1, (before, after)
    # Saved as a sentence-transformers folder, it loads back as the same encoder.
    encoder.save(str(tmp_path / "saved"))
    again = load_encoder(tmp_path / "saved")
    assert (tmp_path / "saved" / "modules.json").is_file()
    assert pair_accuracy(again, pairs) == pytest.approx(after)


def test_dense_and_hybrid_indexes(tiny_folder, demo) -> None:
    catalog, cases = demo
    tools = catalog.tools()
    encoder = load_encoder(tiny_folder, max_seq_length=96)
    dense, bm25 = DenseIndex(encoder, tools), ToolRetriever(tools)
    request = cases[0].request
    hits = dense.search(request, len(tools))
    # Exact search: the scores are the cosines of the request with every tool, best first.
    vectors = encoder.encode([request] + [tool_text(t) for t in tools], normalize_embeddings=True)
    cosines = dict(zip([t.name for t in tools], vectors[1:] @ vectors[0], strict=True))
    assert len(hits) == len(tools)
    assert all(s == pytest.approx(cosines[n], abs=1e-4) for n, s in hits)
    assert all(a[1] >= b[1] - 1e-6 for a, b in zip(hits, hits[1:], strict=False))
    hybrid = HybridRetriever(bm25, dense, pool=10)
    fused = hybrid.search(request, 10)
    lexical = [n for n, _ in bm25.search(request, 10)]
    semantic = [n for n, _ in dense.search(request, 10)]
    union = reciprocal_rank_fusion([lexical, semantic])
    assert fused == union[:10] and len(union) > 10  # the best 10 of the union of both
    assert {n for n, _ in union} == set(lexical) | set(semantic)
    with pytest.raises(ValueError, match="same catalog"):
        HybridRetriever(ToolRetriever(tools[:5]), dense)


def test_scores_per_condition_and_misses(tiny_folder, demo) -> None:
    catalog, cases = demo
    held = [c for c in cases if c.split != "train"]
    encoder = load_encoder(tiny_folder, max_seq_length=96)
    scores = score_retrieval(held, catalog.tools(), encoder, catalog="demo")
    table = {(r["condition"], r["retriever"]): r for r in scores.rows}
    assert set(table) == {(c, r) for c in ("all", "zh", "en", "cross")
                          for r in ("bm25", "dense", "hybrid")}
    zh = sum(c.lang == "zh" for c in held)
    assert table["cross", "bm25"]["n"] == table["zh", "bm25"]["n"] == zh
    assert table["all", "bm25"]["n"] == len(held)
    for row in scores.rows:
        assert 0 <= row["recall@1"] <= row["recall@5"] <= row["recall@10"] <= 1
        misses = [m for m in scores.misses
                  if (m["condition"], m["retriever"]) == (row["condition"], row["retriever"])]
        assert row["misses@5"] == len(misses)
    # Chinese requests share no word with an English-only catalog: BM25 misses them all.
    assert table["cross", "bm25"]["recall@5"] < table["zh", "bm25"]["recall@5"]
    bm25_only = score_retrieval(held, catalog.tools(), None, catalog="demo")
    assert {r["retriever"] for r in bm25_only.rows} == {"bm25"}


def test_a_base_cut_to_its_first_layers(tiny_folder, tmp_path) -> None:
    encoder = load_encoder(tiny_folder, layers=1)
    body = encoder[0].auto_model
    assert len(body.layers) == 1 and body.config.num_hidden_layers == 1
    encoder.save(str(tmp_path / "cut"))
    assert len(load_encoder(tmp_path / "cut")[0].auto_model.layers) == 1
    with pytest.raises(ValueError, match="has 2 layers"):
        load_encoder(tiny_folder, layers=3)
