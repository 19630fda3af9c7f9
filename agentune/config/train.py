"""Stage 5, train: SFT under DeepSpeed ZeRO-3, and its cost estimate."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentune.config.strict import Strict


class TrainCostConfig(Strict):
    """The cost estimate printed before training launches, and the budget that stops it."""

    gpu_type: Literal["A100", "A800", "H100", "H800", "H200", "H20", "L40S", "RTX4090"] = Field(
        "A100", description="GPU the estimate is for (its peak bf16 FLOP/s sets the speed)."
    )
    gpu_count: int | None = Field(
        None, ge=1, le=100_000, description="GPUs the estimate is for (null: the launch's world size)."
    )
    price_per_gpu_hour: float = Field(
        34.742, ge=0, description="Price of one GPU-hour (default: the seed's A100 price, CNY)."
    )
    currency: str = Field("CNY", min_length=1, max_length=16, description="Unit of the price.")
    mfu: float | None = Field(
        None, gt=0, le=1, description="Model FLOPs utilisation to assume (null: calibrated on "
        "the seed's 7B/14B/72B A100 runs, 14-18 %)."
    )
    max_cost: float | None = Field(
        None, ge=0, description="Stop before launching when the estimate is above this (null: "
        "no limit)."
    )


class TrainConfig(Strict):
    """train: an `sft_dataset` version in; full-parameter SFT (TRL SFTTrainer, DeepSpeed ZeRO-3)
    as a multi-process job; a `model` version (weights, tokenizer, chat template, card) out."""

    dataset: str | None = Field(
        None, description="The sft_dataset version to train on: `sft_dataset@VERSION` or "
        "`sft_dataset@ALIAS` (null: the latest)."
    )
    base_model: str = Field(
        "embedded", min_length=1, description="Local transformers model folder to fine-tune, or "
        "`embedded` for the bundled SmolLM2-135M-Instruct."
    )
    sample_form: Literal["messages", "steps"] = Field(
        "messages", description="messages: whole conversations with tools, loss on assistant "
        "tokens only; steps: each agent step's prompt/completion pair in its template's own "
        "format, loss on the completion only."
    )
    chat_template: str | None = Field(
        None, description="Jinja training chat template file (null: dataset.chat_template, else "
        "the base model's own if it has {% generation %} markers, else TRL's training variant, "
        "else templates/chatml_training.j2 for ChatML models)."
    )
    max_length: int = Field(4096, ge=16, le=1_000_000, description="Sequence length in tokens.")
    epochs: float = Field(3.0, gt=0, le=1000, description="Passes over the train split.")
    max_steps: int | None = Field(
        None, ge=1, description="Optimizer steps to run; overrides epochs (null: use epochs)."
    )
    learning_rate: float = Field(1e-5, gt=0, le=1, description="Peak learning rate.")
    lr_scheduler: Literal["cosine", "linear", "constant_with_warmup"] = Field(
        "cosine", description="Learning-rate schedule after warmup."
    )
    warmup_ratio: float = Field(
        0.03, ge=0, lt=1, description="Share of the steps spent warming the learning rate up."
    )
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    per_device_batch_size: int = Field(1, ge=1, le=4096, description="Sequences per process per step.")
    gradient_accumulation_steps: int = Field(
        8, ge=1, le=4096, description="Micro-batches accumulated into one optimizer step."
    )
    gradient_checkpointing: bool = Field(
        True, description="Recompute activations in backward (less memory, ~30 % more compute)."
    )
    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto", description="auto: bf16 on GPUs and CPUs that have it natively, else fp32."
    )
    attention: Literal["auto", "flash_attention_2", "sdpa", "eager"] = Field(
        "auto", description="auto: flash_attention_2 when installed (CUDA), else sdpa."
    )
    packing: Literal["auto", "on", "off"] = Field(
        "auto", description="Padding-free packing of samples into max_length sequences. auto: on "
        "with flash attention (no padding, no cross-sample attention), off otherwise (without "
        "variable-length kernels a packed sequence costs attention over its whole length)."
    )
    logging_steps: int = Field(10, ge=1, description="Steps between logged losses / progress.")
    eval_steps: int = Field(200, ge=1, description="Steps between evaluations on the val split.")
    save_steps: int = Field(200, ge=1, description="Steps between checkpoints (for resuming).")
    save_total_limit: int = Field(2, ge=1, le=1000, description="Checkpoints kept on disk.")
    keep_checkpoints: bool = Field(
        False, description="Keep the run's checkpoints and saved model in its work dir after "
        "the model is published (the store holds a copy either way)."
    )
    deepspeed: str = Field(
        "zero3", min_length=1, description="DeepSpeed config: a name in models/deepspeed "
        "(zero3, zero3_offload) or a path to a DeepSpeed JSON file."
    )
    launcher: Literal["torchrun", "deepspeed"] = Field(
        "torchrun", description="Process launcher. Multi-node runs use `deepspeed` with a hostfile."
    )
    nproc_per_node: int = Field(
        1, ge=1, le=1024, description="Processes per node: GPUs per node, or CPU processes."
    )
    hostfile: str | None = Field(
        None, description="DeepSpeed hostfile (`host slots=N` per line) for multi-node training; "
        "launcher must be `deepspeed`."
    )
    master_port: int | None = Field(
        None, ge=1024, le=65535, description="Rendezvous port (null: a free one)."
    )
    cpu_threads_per_process: int = Field(
        1, ge=1, le=1024, description="OMP_NUM_THREADS of each process when training on CPU."
    )
    work_dir: str = Field(
        "models/runs", min_length=1, description="Where runs keep checkpoints; a run's folder is "
        "named by its dataset version and training settings (not the code version), so a run "
        "restarted with the same inputs resumes from it, also after a code change. One run at a "
        "time per folder: a second is refused, naming the first."
    )
    resume_from: str | None = Field(
        None, description="A checkpoint to start from when the run's own folder has none: a "
        "`checkpoint-N` folder, or a run folder (its last complete checkpoint), e.g. one left by a "
        "run whose dataset version changed with the code. Recorded in the model's lineage (its "
        "parameters and card); the same world size and DeepSpeed stage are needed."
    )
    cost: TrainCostConfig = Field(default_factory=TrainCostConfig)

    @model_validator(mode="after")
    def _multi_node(self) -> "TrainConfig":
        if self.hostfile is not None and self.launcher != "deepspeed":
            raise ValueError("a hostfile needs launcher `deepspeed` (torchrun starts one node)")
        return self
