"""Peak memory of the student losses behind loss-based coreset selection (``loss_topk`` /
``hybrid``), against rows x length, with Qwen's 151,936-token vocabulary.

A random 2-layer model with that vocabulary stands in for the student: the full-vocabulary
logits, which used to be kept for a whole batch of 8 rows (8 x 4,096 x 151,936 x 4 bytes: ~20
GB, more than a machine that trains a 7B student on one GPU has to spare), are the same size
for it as for Qwen2.5-7B; its own weights and activations are small, so what grows is what the
loss computation holds. Prints one JSON line per configuration: rows, length, peak resident
memory above the start (MB, the kernel's high-water mark reset before each run), and the size
the old full-logits batch would have had."""

from __future__ import annotations

import json
import random
import time

import pytest

from agentune.tasks.build_dataset.coreset import LOGITS_BUDGET_BYTES, sequence_losses

VOCAB = 151_936
CONFIGS = [(2, 512), (8, 512), (2, 4096), (8, 4096)]
OLD_BATCH = 8


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak RSS to the current RSS
        f.write("5")


@pytest.mark.benchmark
def test_coreset_loss_peak_memory_is_bounded() -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
        tie_word_embeddings=True)).eval()
    rng = random.Random(0)
    peaks = []
    for rows, length in CONFIGS:
        # Assistant tokens: the second half of every row (what the loss is computed on).
        encoded = [(f"r{i}", [rng.randrange(VOCAB) for _ in range(length)],
                    [0] * (length // 2) + [1] * (length - length // 2)) for i in range(rows)]
        _reset_peak()
        before = _rss_kb("VmRSS")
        start = time.perf_counter()
        losses = sequence_losses(model, encoded)
        seconds = time.perf_counter() - start
        peak_mb = (_rss_kb("VmHWM") - before) / 1024
        assert len(losses) == rows
        peaks.append(peak_mb)
        print(json.dumps({
            "benchmark": "coreset_loss_memory", "rows": rows, "length": length,
            "vocab": VOCAB, "peak_mb": round(peak_mb, 1), "seconds": round(seconds, 2),
            "logits_budget_mb": LOGITS_BUDGET_BYTES >> 20,
            "old_full_logits_batch_mb": round(min(rows, OLD_BATCH) * length * VOCAB * 4 / 2**20),
        }))
    # Bounded: far under one full-logits batch, and flat in rows and in length (measured: ~510
    # to ~540 MB from 8 x 512 to 32 x 4,096, where the old batch held 2.4 to 19 GB of logits).
    assert max(peaks) < 2048
    assert max(peaks) < 2 * min(peaks) + 256
