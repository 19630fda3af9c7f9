"""GRPO rollout throughput against plain generation on the same prompts.

Builds the train stage's own GRPO trainer (one process, no DeepSpeed) on the toy fruit-stand
environment (tests/support/toy_grpo.py) and times one rollout batch: each prompt sampled
``num_generations`` times, tool calls parsed and run in the environment, results appended, the
model asked again (up to ``max_tool_calls`` turns), every rollout verified and rewarded. Then
the same prompts, the same number of samples and the same token budget go through a plain
``model.generate``. It prints one JSON line: model-generated tokens per second of each (tool
results are not counted: the model did not generate them) and their ratio, the price of the
tool loop, the environments and the rewards.

Settings (environment variables):
- ``AGENTUNE_BENCH_MODEL``: ``toy`` (the tests' tiny random Llama, default) or a model folder
  (``embedded`` for SmolLM2-135M), asked with the toy's compact chat template;
- ``AGENTUNE_BENCH_GENERATIONS`` (default 8), ``AGENTUNE_BENCH_ROUNDS`` (batches timed, 3),
  ``AGENTUNE_BENCH_MAX_TOKENS`` (rollout budget, 64).

    make bench
    AGENTUNE_BENCH_MODEL=embedded pytest -m benchmark -s tests/benchmarks/test_grpo_rollout_throughput.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.store.artifact_store import ArtifactStore

from support.toy_grpo import TEMPLATE, publish_scenarios, tool_schemas, toy_catalog, toy_model

pytestmark = pytest.mark.benchmark


def _setting(name: str, default: str) -> str:
    return os.environ.get(f"AGENTUNE_BENCH_{name}", default)


def _trainer(tmp_path: Path, model: Path, catalog: Path, store: ArtifactStore,
             generations: int, max_tokens: int) -> Any:
    from agentune.tasks.train.sft_trainer import build_trainer
    from agentune.tasks.train.stage import plan_training, prepare_launch

    config = RunConfig.model_validate({
        "store": {"root": str(store.root)}, "environments": {"catalog": str(catalog)},
        "reward": {"functions": ["verifier"]},
        "train": {"method": "grpo", "base_model": str(model), "chat_template": str(TEMPLATE),
                  "precision": "fp32", "max_length": 1024,
                  "per_device_batch_size": 4 * generations, "gradient_accumulation_steps": 1,
                  "gradient_checkpointing": False, "work_dir": str(tmp_path / "runs"),
                  "grpo": {"num_generations": generations, "max_steps": 1, "max_tool_calls": 2,
                           "max_total_response_length": max_tokens, "temperature": 1.0}}})
    plan = plan_training(config, store)
    _, _, job = prepare_launch(plan)
    return build_trainer(job.model_copy(update={"deepspeed_config": None}))


def test_grpo_rollout_tokens_per_second_against_plain_generation(tmp_path: Path) -> None:
    import torch

    generations = int(_setting("GENERATIONS", "8"))
    rounds = int(_setting("ROUNDS", "3"))
    max_tokens = int(_setting("MAX_TOKENS", "64"))
    catalog = toy_catalog(tmp_path)
    tools = tool_schemas(catalog)
    kind = _setting("MODEL", "toy")
    model = toy_model(tmp_path, tools) if kind == "toy" else resolve_model_path(kind)
    store = ArtifactStore(tmp_path / "store")
    publish_scenarios(store, catalog)
    trainer = _trainer(tmp_path, model, catalog, store, generations, max_tokens)
    rows = list(trainer.train_dataset)  # 4 prompts
    batch = [row for row in rows for _ in range(generations)]
    trainer.model.train()

    torch.manual_seed(0)
    rollout_tokens, rollout_s, rewards, calls = 0, 0.0, [], 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        out = trainer._generate_and_score_completions(batch)
        rollout_s += time.perf_counter() - started
        # completion_mask x tool_mask: the tokens the model generated (tool results excluded).
        mask = out["completion_mask"]
        if out.get("tool_mask") is not None:
            mask = mask * out["tool_mask"]
        rollout_tokens += int(mask.sum())
    logged = trainer._metrics["train"]
    rewards = logged.get("reward", [])
    calls = logged.get("tools/call_frequency", [])

    tokenizer = trainer.processing_class
    prompts = [tokenizer.apply_chat_template(row["prompt"], tools=tools,
                                             add_generation_prompt=True, tokenize=False)
               for row in rows]
    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    plain_tokens, plain_s = 0, 0.0
    generator = trainer.model.eval()
    for _ in range(rounds):
        started = time.perf_counter()
        with torch.no_grad():
            generated = generator.generate(
                **encoded, do_sample=True, temperature=1.0, max_new_tokens=max_tokens,
                num_return_sequences=generations, pad_token_id=tokenizer.pad_token_id)
        plain_s += time.perf_counter() - started
        new = generated[:, encoded["input_ids"].shape[1]:]
        # Tokens up to and including the first EOS: the rest is padding.
        for seq in new.tolist():
            n = next((i + 1 for i, t in enumerate(seq) if t == tokenizer.eos_token_id), len(seq))
            plain_tokens += n

    line = {
        "benchmark": "grpo_rollout_throughput",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "model": kind, "prompts": len(rows), "generations": generations, "rounds": rounds,
        "max_tokens": max_tokens,
        "grpo_rollout": {"model_tokens": rollout_tokens, "seconds": round(rollout_s, 3),
                         "tokens_per_s": round(rollout_tokens / rollout_s, 2),
                         "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
                         "tool_calls_per_rollout": round(sum(calls) / len(calls), 4)
                         if calls else None},
        "plain_generation": {"model_tokens": plain_tokens, "seconds": round(plain_s, 3),
                             "tokens_per_s": round(plain_tokens / plain_s, 2)},
    }
    line["rollout_vs_plain"] = round(line["grpo_rollout"]["tokens_per_s"]
                                     / line["plain_generation"]["tokens_per_s"], 3)
    print(json.dumps(line, ensure_ascii=False))
    assert rollout_tokens > 0 and plain_tokens > 0
