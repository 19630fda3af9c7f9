"""The CPU settings besides ZeRO-3: `train.deepspeed: none` runs the plain TRL trainer in one
process (torchrun with one rank, OMP_NUM_THREADS = cpu_threads_per_process), resumes from its
checkpoints and publishes a model whose card says how it was trained, SFT and DPO both; the
bundled ZeRO-0 config trains data-parallel over 2 processes. On the tiny random Llama of
tests/support/tiny_train_model.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentune.config.train import TrainConfig
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.stage import (
    hyperparameters,
    last_complete_checkpoint,
    plan_training,
    prepare_launch,
    publish_model,
    run_training,
)

from support.tiny_train_model import train_run_config

ONE_PROCESS = {"deepspeed": "none", "nproc_per_node": 1, "cpu_threads_per_process": 2}



def test_no_deepspeed_means_one_process() -> None:
    with pytest.raises(ValidationError, match="deepspeed `none` trains in one process"):
        TrainConfig(deepspeed="none", nproc_per_node=2)
    assert TrainConfig(**ONE_PROCESS).deepspeed == "none"


def test_the_launch_is_one_torchrun_rank_with_the_configured_threads(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path) -> None:
    plan = plan_training(train_run_config(store, tiny_model, tmp_path, **ONE_PROCESS), store)
    assert plan.job.deepspeed_config is None and plan.world_size == 1
    assert plan.params["train"]["deepspeed"] is None
    command, env, job = prepare_launch(plan)
    assert command[command.index("--nproc_per_node") + 1] == "1"
    assert env["OMP_NUM_THREADS"] == "2" and job.deepspeed_config is None
    assert hyperparameters(plan)["deepspeed config"] == "none"


def test_without_deepspeed_the_launchers_rank_makes_no_process_group(
        store: ArtifactStore, tiny_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's rank variables, as the one-rank launch exports them: the job builds a plain
    single-process trainer (they made a process group of one and a DDP-wrapped model)."""
    import torch.distributed
    from transformers.training_args import ParallelMode

    from agentune.tasks.train.sft_trainer import build_trainer

    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29533"}.items():
        monkeypatch.setenv(name, value)
    plan = plan_training(train_run_config(store, tiny_model, tmp_path, **ONE_PROCESS), store)
    trainer = build_trainer(prepare_launch(plan)[2])
    assert trainer.args.parallel_mode == ParallelMode.NOT_PARALLEL
    assert not torch.distributed.is_initialized()


async def test_sft_resumes_from_its_checkpoint_and_publishes(store: ArtifactStore,
                                                             tiny_model: Path,
                                                             tmp_path: Path) -> None:
    config = train_run_config(store, tiny_model, tmp_path, max_steps=6, save_steps=2,
                              **ONE_PROCESS)
    plan = plan_training(config, store)

    class Stop(Exception):
        pass

    def stop(event: dict[str, Any]) -> None:
        if event["event"] == "checkpoint":
            raise Stop  # as if the flow were cancelled: the job is killed

    with pytest.raises(Stop):
        await run_training(plan, on_line=lambda line: None, on_progress=stop)
    checkpoint = last_complete_checkpoint(Path(plan.job.output_dir))
    assert checkpoint is not None
    step = int(checkpoint.name.split("-")[1])

    events: list[dict[str, Any]] = []
    result = await run_training(plan_training(config, store), on_line=lambda line: None,
                                on_progress=events.append)
    assert events[0] == {"event": "start", "step": step, "max_steps": 6}
    assert result["resumed_from_step"] == step and result["global_step"] == 6
    assert result["world_size"] == 1
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    assert "no DeepSpeed, 1 process)" in manifest.description
    card = (store.file(manifest.ref, "model") / "README.md").read_text(encoding="utf-8")
    assert "supervised fine-tuning (TRL SFTTrainer), no DeepSpeed," in card


async def test_dpo_trains_in_one_process(store: ArtifactStore, tiny_model: Path,
                                         tmp_path: Path) -> None:
    config = train_run_config(store, tiny_model, tmp_path, method="dpo",
                              dpo={"learning_rate": 5e-3, "max_steps": 4}, **ONE_PROCESS)
    result = await run_training(plan_training(config, store), on_line=lambda line: None,
                                on_progress=lambda e: None)
    assert result["world_size"] == 1 and result["global_step"] == 4
    assert result["final_signal"] > result["first_signal"]  # the reward margin grew


async def test_zero0_trains_data_parallel_over_two_processes(store: ArtifactStore,
                                                             tiny_model: Path,
                                                             tmp_path: Path) -> None:
    config = train_run_config(store, tiny_model, tmp_path, deepspeed="zero0", max_steps=3)
    plan = plan_training(config, store)
    result = await run_training(plan, on_line=lambda line: None, on_progress=lambda e: None)
    assert result["world_size"] == 2 and result["global_step"] == 3
    manifest = publish_model(store, plan, result, wall_seconds=1.0, estimate=None)
    assert "DeepSpeed ZeRO-0, 2 processes)" in manifest.description
