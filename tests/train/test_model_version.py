"""A model's version id comes from what its method reads (``METHOD_READS``), each field as the
plan resolved it: an SFT model moves with its own settings, not with DPO's, GRPO's, the reward or
where checkpoints go; a DPO model moves with DPO's. On the tiny random Llama."""

from __future__ import annotations

from pathlib import Path

from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.stage import plan_training

from support.tiny_train_model import train_run_config


def test_a_model_moves_with_what_its_method_reads_only(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    def version(run_as: str, **train: object) -> str:
        config = train_run_config(store, tiny_model, tmp_path, **train)
        return plan_training(config, store, method=run_as).version

    sft = version("sft")
    assert version("sft", dpo={"beta": 0.5}, grpo={"max_steps": 3}, save_steps=7,
                   work_dir=str(tmp_path / "elsewhere"), method="dpo") == sft
    assert version("sft", learning_rate=1e-4) != sft
    assert version("sft", precision="bf16") != sft
    dpo = version("dpo")
    assert dpo != sft and version("dpo", dpo={"beta": 0.5}) != dpo
    config = train_run_config(store, tiny_model, tmp_path, dpo={"learning_rate": 1e-6})
    plan = plan_training(config, store, method="dpo")
    assert plan.params["train"]["learning_rate"] == 1e-6  # the schedule DPO resolved
    assert "reward" not in plan.params and "environments" not in plan.params
