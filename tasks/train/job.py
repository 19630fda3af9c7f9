"""The training job's description (:class:`TrainJob`, written by the stage, read by every rank)
and what building any of the method's trainers needs from it: the examples, the arguments every
method shares, the LoRA config, the tokenizer with the training chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentune.config.environments import EnvironmentsConfig
from agentune.config.train import DPOSettings, GRPOSettings, LoraConfig
from agentune.config.verifier import RewardConfig, VerifierConfig
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.examples import (
    ExampleForm,
    SampleForm,
    read_examples,
    training_examples,
)


class GRPOJob(BaseModel):
    """What the GRPO job needs besides the common settings: the scenarios (their rows as a JSON
    file) and the run config's own sections, serialised as they are: ``train.grpo``, the
    ``environments`` (the catalog path made absolute), the verifier and the reward."""

    model_config = ConfigDict(extra="forbid")

    scenarios_file: str
    settings: GRPOSettings
    environments: EnvironmentsConfig
    verifier: VerifierConfig
    reward: RewardConfig


class TrainJob(BaseModel):
    """One training job, fully resolved: no "auto" left, every path absolute."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["sft", "dpo", "grpo"] = "sft"
    store_root: str
    dataset: str = Field(description="The version trained on, NAME@VERSION (sft_dataset, "
                         "preferences or scenarios).")
    sample_form: SampleForm
    base_model: str = Field(description="The model training starts from (the policy).")
    chat_template: str = Field(description="Training chat template file (has generation markers).")
    output_dir: str = Field(description="Checkpoints folder.")
    final_dir: str = Field(description="Where the trained model is saved.")
    result_path: str
    train_file: str | None = Field(
        None, description="The prepared train examples (JSON lines; task weights and replay "
        "applied); None: the dataset's train split as it is (sft).")
    val_file: str | None = None
    resume_from: str | None = None
    deepspeed_config: str | None = Field(
        None, description="DeepSpeed JSON; None trains without DeepSpeed (one process).")
    lora: LoraConfig | None = Field(None, description="train.lora as configured.")
    dpo: DPOSettings | None = Field(
        None, description="train.dpo as configured; its schedule is resolved into the job's "
        "learning_rate, epochs and max_steps, which are what the trainer reads.")
    grpo: GRPOJob | None = None
    max_length: int
    epochs: float
    max_steps: int | None
    learning_rate: float
    lr_scheduler: str
    warmup_ratio: float
    weight_decay: float
    max_grad_norm: float
    per_device_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    precision: Literal["bf16", "fp16", "fp32"]
    attention: Literal["flash_attention_2", "sdpa", "eager"]
    packing: bool
    logging_steps: int
    eval_steps: int
    save_steps: int
    save_total_limit: int
    seed: int

    @property
    def form(self) -> ExampleForm:
        return "preferences" if self.method == "dpo" else self.sample_form


def job_examples(job: TrainJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The train and val examples: the prepared files, else the dataset's splits."""
    if job.train_file is not None:
        train = read_examples(Path(job.train_file))
        val = read_examples(Path(job.val_file)) if job.val_file else []
    else:
        frame = ArtifactStore(job.store_root).read(job.dataset)
        train = training_examples(frame, split="train", form=job.form, where=job.dataset)
        val = training_examples(frame, split="val", form=job.form, where=job.dataset)
    if not train:
        raise ValueError(f"{job.dataset}: the train split is empty")
    return train, val


def model_dtype(job: TrainJob) -> Any:
    import torch

    if job.deepspeed_config is None:
        # Without DeepSpeed, mixed precision autocasts fp32 weights (training bf16 weights
        # directly would lose the small updates).
        return torch.float32
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[job.precision]


def common_args(job: TrainJob, config_class: type, *, has_val: bool) -> dict[str, Any]:
    """The TrainingArguments every method shares, as keyword arguments of ``config_class``."""
    import torch

    # transformers 5 renamed gradient_checkpointing (the old name warns on every run).
    checkpointing = ("activation_checkpointing" if "activation_checkpointing" in
                     config_class.__dataclass_fields__ else "gradient_checkpointing")
    return dict(
        output_dir=job.output_dir,
        use_cpu=not torch.cuda.is_available(),
        deepspeed=job.deepspeed_config,
        bf16=job.precision == "bf16",
        fp16=job.precision == "fp16",
        num_train_epochs=job.epochs,
        max_steps=job.max_steps if job.max_steps is not None else -1,
        per_device_train_batch_size=job.per_device_batch_size,
        per_device_eval_batch_size=job.per_device_batch_size,
        gradient_accumulation_steps=job.gradient_accumulation_steps,
        learning_rate=job.learning_rate,
        lr_scheduler_type=job.lr_scheduler,
        warmup_steps=job.warmup_ratio,  # a float below 1 is a ratio of the total steps
        weight_decay=job.weight_decay,
        max_grad_norm=job.max_grad_norm,
        **{checkpointing: job.gradient_checkpointing},
        logging_steps=job.logging_steps,
        logging_first_step=True,
        eval_strategy="steps" if has_val else "no",
        eval_steps=job.eval_steps,
        save_strategy="steps",
        save_steps=job.save_steps,
        save_total_limit=job.save_total_limit,
        seed=job.seed,
        data_seed=job.seed,
        report_to="none",
        disable_tqdm=True,
        model_init_kwargs={"dtype": model_dtype(job), "attn_implementation": job.attention},
    )


def peft_config(job: TrainJob) -> Any:
    """peft's LoraConfig for a LoRA job, else None (full-parameter training)."""
    if job.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=job.lora.r, lora_alpha=job.lora.alpha, lora_dropout=job.lora.dropout,
                      target_modules=list(job.lora.target_modules), task_type="CAUSAL_LM")


def job_tokenizer(job: TrainJob) -> Any:
    """The starting model's tokenizer rendering with the training chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job.base_model)
    tokenizer.chat_template = Path(job.chat_template).read_text(encoding="utf-8")
    return tokenizer
