"""Dedup throughput: 100,000 generated trajectories (zh and en, heterogeneous tool arguments) with
planted exact and near duplicates, through exact + MinHash LSH near dedup as build_dataset runs
it. Prints one JSON line: rows/s, precision, recall."""

from __future__ import annotations

import json
import time

import pytest

from agentune.tasks.build_dataset.dedup import NearDupSettings, deduplicate_samples

from support.trajectories import make_trajectories, precision_recall, samples_of

ROWS = 100_000
EXACT, NEAR = 5_000, 10_000


@pytest.mark.benchmark
def test_dedup_throughput_precision_recall() -> None:
    start = time.perf_counter()
    gen = make_trajectories(ROWS - EXACT - NEAR, exact_dups=EXACT, near_dups=NEAR, seed=2026)
    samples = samples_of(gen.rows)
    generated = time.perf_counter() - start

    start = time.perf_counter()
    outcome = deduplicate_samples(samples, NearDupSettings(), stage="benchmark")
    seconds = time.perf_counter() - start

    precision, recall = precision_recall(gen, {r.item_id for r in outcome.rejects})
    print(json.dumps({
        "benchmark": "dedup_throughput", "rows": len(samples), "seconds": round(seconds, 2),
        "rows_per_s": round(len(samples) / seconds, 1), "precision": round(precision, 5),
        "recall": round(recall, 5), "exact_dropped": outcome.stats["exact_duplicates"],
        "near_dropped": outcome.stats["near_duplicates"], "planted_exact": EXACT,
        "planted_near": NEAR, "threshold": outcome.stats["threshold"],
        "lsh_bands_rows": [outcome.stats["lsh_bands"], outcome.stats["lsh_rows"]],
        "generate_seconds": round(generated, 2),
    }))
    assert precision >= 0.99 and recall >= 0.99
