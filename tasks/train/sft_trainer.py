"""The training job: SFT, DPO or GRPO with TRL's trainers under DeepSpeed (ZeRO-3 on GPUs) or,
with ``train.deepspeed: none``, in one process without it; full parameters or LoRA adapters (peft).

Run by a launcher, one process per GPU (or per CPU share; one process without DeepSpeed)::

    torchrun --nproc_per_node N -m agentune.tasks.train.sft_trainer --job <work dir>/job.json
    deepspeed --num_gpus N --module agentune.tasks.train.sft_trainer --job <work dir>/job.json

Everything the job needs is in the job file (:class:`TrainJob`), written by the train stage
(``tasks/train/stage.py``); its method (``methods.METHODS``) builds the trainer. Rank 0 prints progress as lines starting with
:data:`PROGRESS_PREFIX` followed by JSON, which the launching task turns into a Prefect progress
artifact, and at the end writes ``result.json`` (metrics and the log history) for the model card.
The same code runs on GPUs (NCCL) and on CPU processes (gloo): FACTS' CPU recipe is to initialise
DeepSpeed's process group before building the training arguments, with ``use_cpu=True``. Without
DeepSpeed there is no process group (the launcher's rank variables are dropped): the plain Trainer
keeps fp32 weights and autocasts to the job's precision (``job.model_dtype``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentune.tasks.train.job import TrainJob
from agentune.tasks.train.methods import METHODS

if TYPE_CHECKING:
    from transformers import Trainer

PROGRESS_PREFIX = "@@agentune-progress "
RESULT_FILE = "result.json"
# Written into a checkpoint folder once every rank has finished writing its part of it; a folder
# without it is what a killed save left, and cannot be resumed from.
CHECKPOINT_COMPLETE = "agentune-checkpoint-complete"


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _leave_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def emit_progress(event: str, **fields: Any) -> None:
    print(PROGRESS_PREFIX + json.dumps({"event": event, **fields}), flush=True)


def _progress_callback() -> Any:
    from transformers import TrainerCallback

    class ProgressReporter(TrainerCallback):
        """Rank 0 prints step, loss, tokens/s and the Trainer's metrics at every log, and each
        checkpoint saved (it replaces the Trainer's own printing of the logs)."""

        def __init__(self) -> None:
            self._t0 = 0.0
            self._tokens0 = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._t0, self._tokens0 = time.perf_counter(), state.num_input_tokens_seen
            if state.is_world_process_zero:
                emit_progress("start", step=state.global_step, max_steps=state.max_steps)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not state.is_world_process_zero or not logs:
                return
            elapsed = max(time.perf_counter() - self._t0, 1e-9)
            tokens = state.num_input_tokens_seen
            common = {"step": state.global_step, "max_steps": state.max_steps,
                      "epoch": state.epoch, "tokens_seen": tokens,
                      "tokens_per_s": (tokens - self._tokens0) / elapsed}
            metrics = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
            if "loss" in logs:
                emit_progress("log", loss=logs["loss"], metrics=metrics, **common)
            elif "eval_loss" in logs:
                emit_progress("eval", eval_loss=logs["eval_loss"], metrics=metrics, **common)

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            # Every rank writes its own shards and RNG state; rank 0 alone cannot tell they are
            # done, so all ranks meet here before the checkpoint is marked complete.
            _barrier()
            if state.is_world_process_zero:
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                (folder / CHECKPOINT_COMPLETE).write_text(f"{state.global_step}\n")
                emit_progress("checkpoint", step=state.global_step)

    return ProgressReporter()


def build_trainer(job: TrainJob) -> Trainer:
    """The TRL trainer for a job (data read and validated, model loaded, labels built).

    Under DeepSpeed ZeRO-3 the model is partitioned as it loads; tests call this in-process
    without DeepSpeed to inspect the labels.
    """
    from transformers import PrinterCallback

    if job.deepspeed_config is None:
        _leave_the_launchers_group()
    trainer = METHODS[job.method].build_trainer(job, _progress_callback())
    trainer.remove_callback(PrinterCallback)
    return trainer


RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def _leave_the_launchers_group() -> None:
    """Without DeepSpeed the job is one process; torchrun still exports a rank, from which
    TrainingArguments would make a process group of one and wrap the model in DDP (every step
    paying for it). The variables go, so the plain Trainer sees a single process."""
    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise RuntimeError("train.deepspeed none trains in one process; the launcher started "
                           f"{os.environ['WORLD_SIZE']}")
    for name in RANK_VARIABLES:
        os.environ.pop(name, None)


def _quiet_job_output() -> None:
    """Keep the log streamed into the flow readable: progress goes through the progress lines."""
    import datasets
    from transformers.utils import logging as transformers_logging

    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()
    # DeepSpeed calls torch.distributed collectives that torch 2.13 deprecates; the warning repeats
    # every step.
    warnings.filterwarnings(
        "ignore", message=r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor)`",
        category=FutureWarning,
    )


def run_job(job: TrainJob) -> None:
    """Train, evaluate on val, save the whole model (all ranks), write the result (rank 0)."""
    _quiet_job_output()
    import torch

    if job.deepspeed_config is not None and not torch.cuda.is_available():
        import deepspeed

        # FACTS: on CPU the process group must exist before TrainingArguments is built.
        deepspeed.init_distributed()
    trainer = build_trainer(job)
    resumed = {"global_step": 0, "num_input_tokens_seen": 0}
    if job.resume_from is not None:
        resumed = json.loads((Path(job.resume_from) / "trainer_state.json").read_text("utf-8"))
    started = time.perf_counter()
    train_output = trainer.train(resume_from_checkpoint=job.resume_from)
    train_seconds = time.perf_counter() - started
    eval_loss = None
    if trainer.eval_dataset is not None:
        # The periodic evaluation may already have run at the last step.
        evaluated = [e for e in trainer.state.log_history
                     if "eval_loss" in e and e.get("step") == trainer.state.global_step]
        eval_loss = (evaluated[-1] if evaluated else trainer.evaluate())["eval_loss"]
    # Under ZeRO-3 every rank must take part: the 16-bit weights are gathered on save.
    trainer.save_model(job.final_dir)
    if trainer.is_world_process_zero():
        _write_result(job, trainer, train_output.training_loss, resumed, train_seconds, eval_loss)
    # Leave together and take the process group down cleanly: a rank exiting with the group's
    # threads still running can abort ("terminate called without an active exception"), which
    # the launcher reports as a failed job after the model was saved.
    _barrier()
    _leave_process_group()
    if trainer.is_world_process_zero():
        emit_progress("done", step=trainer.state.global_step, max_steps=trainer.state.max_steps)


def _write_result(job: TrainJob, trainer: Trainer, train_loss_mean: float,
                  resumed: dict[str, Any], train_seconds: float, eval_loss: float | None) -> None:
    """result.json: what the model card and the published version's stats are made of."""
    import torch

    state = trainer.state
    tokens_this_run = state.num_input_tokens_seen - int(resumed["num_input_tokens_seen"])
    losses = [entry["loss"] for entry in state.log_history if "loss" in entry]
    # What the method optimises, as it went.
    signal = METHODS[job.method].signal
    signals = [entry[signal] for entry in state.log_history if signal and signal in entry]
    result = {
        "method": job.method,
        "lora": job.lora is not None,
        "signal": signal,
        "first_signal": signals[0] if signals else None,
        "final_signal": signals[-1] if signals else None,
        "global_step": state.global_step,
        "max_steps": state.max_steps,
        "epoch": state.epoch,
        "resumed_from_step": int(resumed["global_step"]),
        "world_size": trainer.args.world_size,
        "train_loss_mean": train_loss_mean,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "eval_loss": eval_loss,
        "tokens_seen": state.num_input_tokens_seen,
        "tokens_this_run": tokens_this_run,
        "train_seconds": train_seconds,
        "tokens_per_s": tokens_this_run / train_seconds if train_seconds > 0 else None,
        "attention": job.attention,
        "precision": job.precision,
        "packing": job.packing,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "log_history": state.log_history,
    }
    path = Path(job.result_path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentune.tasks.train.sft_trainer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, type=Path, help="the job JSON file")
    # The deepspeed launcher passes --local_rank; the rank is read from the environment.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    job = TrainJob.model_validate_json(args.job.read_text(encoding="utf-8"))
    run_job(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
