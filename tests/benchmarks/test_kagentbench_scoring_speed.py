"""KAgentBench scoring throughput: a generated 3,000-prediction file (every sample type, zh and
en, answers from golden copies to malformed JSON; concluding and profile answers 20-160 tokens)
scored end to end, files read and validated included. The peer is the same scorer with the
similarity computed the way the official script computes it (a new rouge-chinese ``Rouge`` per
call, its O(n*m) dictionary LCS, ROUGE-1/2 computed alongside, no caching), on a subsample;
both give identical numbers. Prints one JSON line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rouge_chinese import Rouge

from agentune.tasks.evaluate.benchmarks.kagentbench import scoring
from agentune.tasks.evaluate.benchmarks.kagentbench.format import load_predictions
from agentune.tasks.evaluate.benchmarks.kagentbench.rouge import mixed_tokens, rouge_words
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import (
    ScoringOptions,
    score_files,
    score_samples,
)

from support.kagentbench_files import make_kagentbench

PREDICTIONS = 3_000
PEER_SAMPLES = 300


def _official_similarity(label: object, prediction: object, mode: str = "line") -> float:
    label, prediction = str(label), str(prediction)
    if label == "" or prediction == "":
        return 0.0
    hyp = " ".join(mixed_tokens(prediction, mode))  # type: ignore[arg-type]
    ref = " ".join(mixed_tokens(label, mode))  # type: ignore[arg-type]
    if not hyp or not ref:
        return 0.0
    return Rouge().get_scores(hyp, ref)[0]["rouge-l"]["f"]


@pytest.mark.benchmark
def test_kagentbench_scoring_throughput(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench_path, preds_path = make_kagentbench(tmp_path, PREDICTIONS, seed=2026)
    options = ScoringOptions(tokenizer="line")

    start = time.perf_counter()
    result = score_files(bench_path, preds_path, options)
    seconds = time.perf_counter() - start

    bench, predictions = load_predictions(bench_path, preds_path)
    subsample = predictions.samples[:PEER_SAMPLES]
    rouge_words.cache_clear()  # both sides start cold
    start = time.perf_counter()
    ours = score_samples(bench.samples, subsample, options)
    ours_seconds = time.perf_counter() - start
    monkeypatch.setattr(scoring, "similarity", _official_similarity)
    start = time.perf_counter()
    peer = score_samples(bench.samples, subsample, options)
    peer_seconds = time.perf_counter() - start

    print(json.dumps({
        "benchmark": "kagentbench_scoring", "predictions": PREDICTIONS,
        "prompts": len(result.items), "seconds": round(seconds, 2),
        "rows_per_s": round(PREDICTIONS / seconds, 1),
        "prompts_per_s": round(len(result.items) / seconds, 1),
        "peer": "official-style similarity (rouge-chinese per call)",
        "peer_subsample": PEER_SAMPLES, "subsample_seconds": round(ours_seconds, 3),
        "peer_seconds": round(peer_seconds, 3),
        "speedup_vs_peer": round(peer_seconds / ours_seconds, 1),
        "overall": round(result.scores.values["overall"], 6), "tokenizer": result.tokenizer,
    }))
    assert peer.scores.values == ours.scores.values
    assert peer_seconds > ours_seconds
