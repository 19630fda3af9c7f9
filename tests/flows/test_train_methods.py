"""DPO and LoRA through the train stage, and the lineage of every model version it publishes.

The multi-process runs use DeepSpeed ZeRO-3 over 2 gloo processes, as the SFT tests do, on the
tiny random Llama of tests/support/tiny_train_model.py.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from agentune.config import RunConfig
from agentune.config.train import TrainConfig
from agentune.tasks.common.schemas import PREFERENCE_FEATURES, SFT_FEATURES
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.stage import plan_training, publish_model, run_training

from support.preference_pairs import log_prob_margins, preference_rows
from support.tiny_train_model import train_run_config


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    store.publish("preferences", preference_rows(copies=2), features=PREFERENCE_FEATURES)
    return store


def run_config(store: ArtifactStore, model: Path, tmp_path: Path, **train: Any) -> RunConfig:
    return train_run_config(store, model, tmp_path, **({"method": "dpo"} | train))


async def test_dpo_zero3_raises_the_chosen_minus_rejected_margin(store: ArtifactStore,
                                                                 tiny_model: Path,
                                                                 tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = run_config(store, tiny_model, tmp_path,
                        dpo={"beta": 0.1, "learning_rate": 5e-3, "max_steps": 12})
    plan = plan_training(config, store)
    assert plan.method == "dpo" and plan.job.dpo is not None
    examples = list(plan.train_examples)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    before = log_prob_margins(AutoModelForCausalLM.from_pretrained(tiny_model), tokenizer,
                              examples, plan.chat_template)
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    assert result["world_size"] == 2 and result["global_step"] == 12
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    trained = AutoModelForCausalLM.from_pretrained(store.file(manifest.ref, "model"))
    after = log_prob_margins(trained, tokenizer, examples, plan.chat_template)
    message = (f"mean log-prob margin (chosen - rejected) on the {len(examples)} training pairs: "
               f"{mean(before):.3f} before, {mean(after):.3f} after 12 DPO steps")
    assert mean(after) > mean(before) + 1.0, message
    assert sum(a > b for a, b in zip(after, before, strict=True)) >= 0.75 * len(examples), message
    # TRL's own view agrees: its logged reward margin ends above where it started.
    assert result["signal"] == "rewards/margins" and result["final_signal"] > result["first_signal"]
    params = manifest.params
    assert params["train"]["method"] == "dpo" and params["train"]["dpo"]["loss_type"] == "sigmoid"
    assert params["train"]["base_model"]["name"] == str(tiny_model)
    assert store.file(manifest.ref, "reward_curve.png").stat().st_size > 1000


async def test_lora_sft_then_dpo_from_it_publish_adapters_and_name_their_lineage(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentune.tasks.llm.model_folders import adapter_base, is_adapter, load_causal_lm

    from support.tiny_train_model import sft_rows

    sft_data = store.publish("sft_dataset", sft_rows(), features=SFT_FEATURES).ref
    lora = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"],
            "merge": True}
    config = run_config(store, tiny_model, tmp_path, method="sft", max_steps=4,
                        learning_rate=2e-2, lora=lora)
    plan = plan_training(config, store)
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    sft = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    merged_dir, adapter_dir = store.file(sft.ref, "model"), store.file(sft.ref, "adapter")
    assert not is_adapter(merged_dir) and is_adapter(adapter_dir)
    assert adapter_base(adapter_dir) == tiny_model.resolve()
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    inputs = tokenizer(["北京今天天气怎么样?"], return_tensors="pt")
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()(**inputs).logits
        on_base = load_causal_lm(adapter_dir).eval()(**inputs).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()(**inputs).logits
    assert torch.allclose(merged, on_base, atol=1e-4)
    assert not torch.allclose(merged, base, atol=1e-4)  # the adapter learned something

    # DPO from that SFT version, LoRA without merging: the version holds the adapter only.
    config = run_config(store, tiny_model, tmp_path, from_model=str(sft.ref),
                        lora=lora | {"merge": False}, dpo={"max_steps": 2})
    plan = plan_training(config, store)
    assert plan.merge_start is False and plan.base_model == merged_dir.resolve()
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    dpo = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    adapter_only = store.file(dpo.ref, "model")
    assert is_adapter(adapter_only) and adapter_base(adapter_only) == merged_dir.resolve()
    assert load_causal_lm(adapter_only)(**inputs).logits.shape == merged.shape

    # Lineage: method, reward and parent model of each version, and the parents themselves.
    prefs = store.resolve("preferences")
    assert sft.params["train"]["method"] == "sft" and "reward" not in sft.params
    assert sft.params["train"]["base_model"]["name"] == str(tiny_model)
    assert [p["name"] for p in sft.parents] == ["sft_dataset"]
    assert dpo.params["train"]["method"] == "dpo"
    assert dpo.params["train"]["base_model"] == {"name": str(sft.ref), "version": str(sft.ref)}
    assert dpo.params["train"]["from_model"] == str(sft.ref)
    assert sorted(f"{p['name']}@{p['version']}" for p in dpo.parents) == sorted(
        [str(sft.ref), str(prefs)])
    assert dpo.stats["lineage"]["method"] == "dpo" and dpo.stats["lora"] == {
        "adapter": True, "merged": False}
    assert sft_data in [store.resolve(f"{p['name']}@{p['version']}") for p in sft.parents]


def test_the_pipeline_runs_sft_then_the_configured_method() -> None:
    from agentune.flows.pipeline import pipeline_steps

    def steps(method: str) -> list[tuple[str, str, dict[str, Any]]]:
        return [s for s in pipeline_steps(RunConfig(train=TrainConfig(method=method)))
                if s[1] in ("train", "build_preferences", "evaluate")]

    assert steps("sft") == [("train", "train", {"method": "sft"}), ("evaluate", "evaluate", {})]
    assert steps("dpo") == [("train", "train", {"method": "sft"}),
                            ("build_preferences", "build_preferences", {}),
                            ("train_dpo", "train", {"method": "dpo", "from_model": "{sft}"}),
                            ("evaluate", "evaluate", {})]
    assert [s[0] for s in steps("grpo")] == ["train", "train_grpo", "evaluate"]


@pytest.mark.slow
async def test_embedded_smollm2_trains_dpo_with_zero3(store: ArtifactStore, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agentune.tasks.llm.embedded_model import resolve_model_path

    config = run_config(store, resolve_model_path("embedded"), tmp_path, precision="auto",
                        per_device_batch_size=1, dpo={"max_steps": 2, "learning_rate": 1e-6})
    plan = plan_training(config, store)
    assert plan.chat_template_origin == "templates/chatml_training.j2"
    assert plan.mix["length audit"]["train"]["over max_length"] == 0
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    assert result["global_step"] == 2 and result["world_size"] == 2
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    model = AutoModelForCausalLM.from_pretrained(store.file(manifest.ref, "model"))
    assert sum(p.numel() for p in model.parameters()) == plan.model_parameters


async def test_the_train_flow_honours_method_dpo_and_reuses_its_version(
        prefect_api: None, store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from agentune.flows.train import train

    config = run_config(store, tiny_model, tmp_path, dpo={"max_steps": 2})
    out = await train(config=config)
    assert out["stage"] == "train" and not out["reused"]
    manifest = store.manifest(out["outputs"]["model"])
    assert manifest.params["train"]["method"] == "dpo" and manifest.stats["global_step"] == 2
    assert {"rewards/margins (first logged)", "rewards/margins (last logged)"} <= {
        r["metric"] for r in manifest.stats["summary"]}
    card = (store.file(manifest.ref, "model") / "README.md").read_text(encoding="utf-8")
    assert "direct preference optimisation" in card and "| dpo beta | 0.1 |" in card
    assert "| length audit |" in card and "| dpo learning_rate |" not in card
    assert manifest.stats["tokens_seen"] > 0  # both completions of each pair are counted
    async with get_client() as client:
        curves = await client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["train-dpo-reward-curve"])))
    assert curves and len(curves[0].data) >= 2
    again = await train(config=config)
    assert again["reused"] and again["outputs"] == out["outputs"]


def test_pairs_longer_than_max_length_are_refused_or_dropped_and_reported(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from agentune.tasks.train.length_audit import pair_length

    full = plan_training(run_config(store, tiny_model, tmp_path), store)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    lengths = sorted(pair_length(tokenizer, ex, full.chat_template).longest
                     for ex in full.train_examples)
    cut = lengths[len(lengths) // 2]  # about half the pairs are longer
    with pytest.raises(ValueError, match=r"pair\(s\) do not fit train.max_length = "
                                         rf"{cut}: p\d-\d-\d: "):
        plan_training(run_config(store, tiny_model, tmp_path, max_length=cut), store)
    dropped = plan_training(run_config(store, tiny_model, tmp_path, max_length=cut,
                                       dpo={"overlength": "drop"}), store)
    audit = dropped.mix["length audit"]["train"]
    longer = sum(n > cut for n in lengths)
    assert audit["over max_length"] == longer == len(audit["dropped"])
    assert len(dropped.train_examples) == len(full.train_examples) - longer
    assert any("would cut the last" in d or "would drop the pair" in d for d in audit["dropped"])


def test_reference_free_dpo_compares_to_zero_reference_log_probs(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    from agentune.tasks.train.sft_trainer import build_trainer
    from agentune.tasks.train.stage import prepare_launch

    plan = plan_training(run_config(store, tiny_model, tmp_path,
                                    dpo={"reference_free": True, "loss_type": "hinge"}), store)
    _, _, job = prepare_launch(plan)
    trainer = build_trainer(job.model_copy(update={"deepspeed_config": None}))
    assert trainer.ref_model is None and trainer.loss_types == ["hinge"]
    data = trainer.train_dataset
    assert set(data["ref_chosen_logps"]) == {0.0} == set(data["ref_rejected_logps"])
