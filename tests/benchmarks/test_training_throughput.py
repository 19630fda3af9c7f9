"""Training throughput with and without padding-free packing, and how much compute is padding.

Runs the train stage's own trainer (``sft_trainer.build_trainer``, one process, no DeepSpeed) on
synthetic agent conversations of spread-out lengths, once with padded batches and once packed,
and prints one JSON line: real (non-padding) tokens per second, and the fraction of the tokens
the model computed on that were real. On CUDA it also prints model FLOPs utilisation
(6 x parameters x real tokens/s over the GPU's peak bf16 FLOP/s).

Settings (environment variables):
- ``AGENTUNE_BENCH_MODEL``: ``tiny`` (random 2-layer Llama, SmolLM2 vocabulary; default on CPU),
  ``qwen2.5-0.5b`` (random weights in Qwen2.5-0.5B's shape; default on CUDA), or a model folder.
- ``AGENTUNE_BENCH_STEPS`` (default 6 on CPU, 30 on CUDA), ``AGENTUNE_BENCH_MAX_LENGTH``
  (512 / 4096), ``AGENTUNE_BENCH_BATCH`` (sequences per step, 2 / 4).

    make bench                      # CPU
    AGENTUNE_BENCH_MODEL=qwen2.5-0.5b pytest -m benchmark -s tests/benchmarks/test_training_throughput.py
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from agentune.paths import templates_dir
from agentune.tasks.common.schemas import SFT_FEATURES
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.cost import GPU_PEAK_TFLOPS
from agentune.tasks.train.sft_trainer import TrainJob, build_trainer

pytestmark = pytest.mark.benchmark

WORDS = ["weather", "city", "search", "order", "refund", "flight", "hotel", "price", "stock", "news", "天气", "城市", "订单", "退款", "航班", "酒店", "价格", "股票", "新闻", "查询", "the", "a", "of", "to", "and", "please", "find", "show", "me", "check"]
TOOL = {"type": "function", "function": {"name": "search", "description": "Search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}


def _setting(name: str, cpu: str, cuda: str) -> str:
    import torch

    return os.environ.get(f"AGENTUNE_BENCH_{name}", cuda if torch.cuda.is_available() else cpu)


def bench_model(kind: str, folder: Path) -> Path:
    """A random-initialised model of the requested shape with the embedded model's tokenizer
    (its ids fit in either vocabulary; only the shape matters for throughput)."""
    from transformers import (
        AutoTokenizer,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    if kind not in ("tiny", "qwen2.5-0.5b"):
        return resolve_model_path(kind)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    if kind == "tiny":
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
            rope_theta=1_000_000.0, tie_word_embeddings=True))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def synthetic_rows(n: int, max_length: int, seed: int = 0) -> list[dict[str, Any]]:
    """Tool-using conversations whose lengths spread log-uniformly up to ~max_length tokens."""
    rng = random.Random(seed)

    def text(words: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(words))

    rows = []
    for i in range(n):
        # Target length log-uniform over [max_length/8, 0.9 max_length]; the system turn with the
        # tool schema takes ~260 tokens and a word ~2.4 tokens in this tokenizer.
        target = 2 ** rng.uniform(math.log2(max_length / 8), math.log2(max_length * 0.9))
        words = max(12, int((target - 260) / 2.4))
        messages = [
            {"role": "user", "content": text(max(3, words // 6))},
            {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                "name": "search", "arguments": {"query": text(4)}}}]},
            {"role": "tool", "content": text(max(3, words // 2))},
            {"role": "assistant", "content": text(max(3, words // 3))},
        ]
        rows.append({"id": f"b{i}", "split": "train", "source": "agent", "query_id": f"q{i}",
                     "set_id": "s", "template_id": "bench", "template_source": "benchmark",
                     "task_type": "tool_selection", "lang": "en", "messages": messages,
                     "tools": [TOOL], "steps": [], "cluster_id": f"c{i}", "n_tokens": None,
                     "kind": None, "derivation": "none", "derived_from": None})
    return rows


def run_mode(job: TrainJob) -> dict[str, Any]:
    """Train ``job`` and measure real tokens/s after the first step, and the padding share."""
    import torch
    from transformers import TrainerCallback

    trainer = build_trainer(job)
    counts = {"computed": 0, "real": 0}
    collate = trainer.data_collator

    def counting_collator(examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = collate(examples)
        computed = batch["input_ids"].numel()
        counts["computed"] += computed
        mask = batch.get("attention_mask")
        counts["real"] += int(mask.sum()) if mask is not None else computed  # padding-free: none
        return batch

    trainer.data_collator = counting_collator
    marks: dict[str, tuple[float, int]] = {}

    class Timer(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            point = (time.perf_counter(), state.num_input_tokens_seen)
            marks.setdefault("first", point)  # the first step pays for warm-up: not timed
            marks["last"] = point

    trainer.add_callback(Timer())
    trainer.train()
    (t0, n0), (t1, n1) = marks["first"], marks["last"]
    return {"tokens_per_s": round((n1 - n0) / (t1 - t0), 1),
            "real_token_fraction": round(counts["real"] / counts["computed"], 4),
            "real_tokens": counts["real"], "computed_tokens": counts["computed"]}


def gpu_type_of(device_name: str) -> str | None:
    """The ``GPU_PEAK_TFLOPS`` key for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100")."""
    name = device_name.upper().replace(" ", "")
    # Longest first, so "H200" is not read as "H20".
    for key in sorted(GPU_PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return key
    return None


def test_training_throughput_with_and_without_packing(tmp_path: Path) -> None:
    import torch

    from agentune.tasks.train.stage import (
        count_parameters,
        resolve_attention,
        resolve_precision,
    )

    cuda = torch.cuda.is_available()
    kind = _setting("MODEL", "tiny", "qwen2.5-0.5b")
    steps = int(_setting("STEPS", "6", "30"))
    max_length = int(_setting("MAX_LENGTH", "512", "4096"))
    batch = int(_setting("BATCH", "2", "4"))
    model = bench_model(kind, tmp_path / "model")
    store = ArtifactStore(tmp_path / "store")
    # Enough rows for the packed run, which takes several conversations per sequence.
    ref = store.publish("sft_dataset", synthetic_rows(steps * batch * 12, max_length),
                        features=SFT_FEATURES).ref
    template = tmp_path / "chat_template.jinja"
    template.write_text((templates_dir() / "chatml_training.j2").read_text(encoding="utf-8"))
    attention = resolve_attention("auto")
    base = dict(
        store_root=str(store.root), dataset=str(ref), sample_form="messages",
        base_model=str(model), chat_template=str(template), result_path=str(tmp_path / "r.json"),
        max_length=max_length, epochs=1.0, max_steps=steps, learning_rate=1e-5,
        lr_scheduler="cosine", warmup_ratio=0.0, weight_decay=0.0, max_grad_norm=1.0,
        per_device_batch_size=batch, gradient_accumulation_steps=1,
        gradient_checkpointing=True, precision=resolve_precision("auto", cuda=cuda),
        attention=attention, logging_steps=steps, eval_steps=10_000, save_steps=10_000,
        save_total_limit=1, seed=0,
    )
    results = {}
    for mode, packing in (("padded", False), ("packed", True)):
        job = TrainJob(output_dir=str(tmp_path / mode), final_dir=str(tmp_path / f"{mode}-final"),
                       packing=packing, **base)
        results[mode] = run_mode(job)
    params = count_parameters(model)
    line: dict[str, Any] = {
        "benchmark": "training_throughput", "device": torch.cuda.get_device_name() if cuda else
        "cpu", "model": kind, "parameters": params, "attention": attention,
        "precision": base["precision"], "max_length": max_length, "batch": batch,
        "steps": steps, **results,
        "packed_speedup": round(results["packed"]["tokens_per_s"]
                                / results["padded"]["tokens_per_s"], 3),
    }
    gpu = gpu_type_of(torch.cuda.get_device_name()) if cuda else None
    if gpu is not None:
        peak = GPU_PEAK_TFLOPS[gpu] * 1e12
        line["mfu"] = {mode: round(6 * params * r["tokens_per_s"] / peak, 4)
                       for mode, r in results.items()}
    print(json.dumps(line, ensure_ascii=False))
    assert results["packed"]["real_token_fraction"] == 1.0
    assert results["padded"]["real_token_fraction"] < 1.0
