"""Stage 5, train: SFT, DPO or GRPO under DeepSpeed ZeRO-3 or in one process without DeepSpeed
(full parameters or LoRA), with replay and task weights, and the cost estimate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentune.config.inputs import ARTIFACT, RESOLVED, UNTRACKED
from agentune.config.strict import Strict

# What the train stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("train", "dataset.chat_template", "environments", "reward",
                          "verifier")
# What each method reads of it: the model's version id comes from these (an SFT model does not
# move with the reward, the verifier or the environments, which only GRPO's rollouts run).
METHOD_READS: dict[str, tuple[str, ...]] = {
    "sft": ("train", "dataset.chat_template"),
    "dpo": ("train", "dataset.chat_template"),
    "grpo": READS,
}

NO_DEEPSPEED = "none"
"""train.deepspeed's value for one process without DeepSpeed."""


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


class LoraConfig(Strict):
    """LoRA adapters (peft) instead of full-parameter training; seed 004's defaults."""

    r: int = Field(64, ge=1, le=4096, description="Adapter rank.")
    alpha: int = Field(128, ge=1, le=65536, description="Scaling numerator (lora_alpha).")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                 "down_proj"],
        min_length=1, description="Module names the adapters wrap (lm_head is not allowed: DPO "
        "reads its weight directly).")
    merge: bool = Field(
        False, description="Also publish the merged weights (base + adapter, loads without "
        "peft) beside the adapter; the version's `model` is then the merged model.")


class ReplayConfig(Strict):
    """Online continual replay (seed 004): rows of earlier training-data versions of the parent
    model's lineage mixed into this run."""

    buffer_size: int = Field(
        4096, ge=1, description="Rehearsal buffer: earlier rows sampled (seeded) into the "
        "buffer, the most recent versions first.")
    ratio: float = Field(
        0.3, gt=0, lt=1, description="Share of the training rows that are replayed rows: "
        "round(new * ratio / (1 - ratio)) are drawn from the buffer (cycling through it when "
        "it holds fewer).")


class DPOSettings(Strict):
    """train.method dpo: TRL DPOTrainer on `preferences` pairs (seed 004's dpo_config)."""

    beta: float = Field(0.1, gt=0, description="Deviation from the reference model (IPO: tau).")
    loss_type: Literal["sigmoid", "hinge", "ipo"] = Field("sigmoid", description="DPO loss.")
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="Probability a preference label is flipped (cDPO).")
    reference_free: bool = Field(
        False, description="Compare to a uniform reference (log-probs 0) instead of the "
        "starting model: no reference forward passes.")
    learning_rate: float | None = Field(
        5e-7, gt=0, le=1, description="Peak learning rate (null: train.learning_rate).")
    epochs: float | None = Field(1.0, gt=0, le=1000, description="Passes (null: train.epochs).")
    max_steps: int | None = Field(None, ge=1, description="Steps; overrides epochs.")
    overlength: Literal["error", "drop"] = Field(
        "error", description="A pair longer than train.max_length would lose its decision to "
        "TRL's silent truncation (or be dropped by it): error refuses the run naming the rows; "
        "drop leaves them out and reports them in the run card.")


class GRPOSettings(Strict):
    """train.method grpo: TRL GRPOTrainer with the environments as `environment_factory`,
    rewarded by the reward registry; seed 003's multi-turn knobs mapped to TRL's."""

    scenarios: str | None = Field(
        None, description="The scenarios version whose train split is the prompts (null: "
        "latest).")
    max_scenarios: int | None = Field(
        None, ge=1, description="Training scenarios used (a seeded spread over kinds; null: all).")
    num_generations: int = Field(4, ge=2, le=256, description="Group size G per prompt.")
    beta: float = Field(0.1, ge=0, description="KL coefficient to the reference model.")
    temperature: float = Field(1.0, gt=0, le=2, description="Rollout sampling temperature.")
    max_tool_calls: int = Field(
        4, ge=0, le=256, description="Tool-calling turns per rollout (TRL "
        "max_tool_calling_iterations).")
    max_parallel_calls: int = Field(
        4, ge=1, le=64, description="Calls run per turn; further calls of the turn return an "
        "error without running.")
    max_total_response_length: int = Field(
        1024, ge=8, le=1_000_000, description="Completion tokens per rollout, tool results "
        "included (TRL max_completion_length).")
    max_tool_response_length: int = Field(
        256, ge=8, le=1_000_000, description="Tokens of one tool result; longer ones are cut.")
    tool_response_truncate_side: Literal["left", "right", "middle"] = Field(
        "middle", description="Which part of a long tool result is cut.")
    tool_parser_format: Literal["hermes"] = Field(
        "hermes", description="How tool calls are read from completions: Hermes <tool_call> "
        "JSON blocks (TRL's Qwen response template).")
    learning_rate: float | None = Field(
        1e-6, gt=0, le=1, description="Peak learning rate (null: train.learning_rate).")
    max_steps: int = Field(100, ge=1, description="Optimizer steps.")
    use_vllm: bool = Field(False, description="Generate rollouts with vLLM (GPU runs).")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", description="vLLM in the training processes, or a `trl vllm-serve` server.")
    vllm_server_base_url: str | None = Field(None, description="server mode: its base URL.")


class TrainConfig(Strict):
    """train: an `sft_dataset` (sft), `preferences` (dpo) or `scenarios` (grpo) version in;
    TRL's SFTTrainer / DPOTrainer / GRPOTrainer under DeepSpeed (ZeRO-3 on GPUs) as a
    multi-process job, or in one process without DeepSpeed; full parameters or LoRA; a `model`
    version (weights or adapter, tokenizer, chat template, card) out."""

    method: Annotated[Literal["sft", "dpo", "grpo"], RESOLVED] = Field(
        "sft", description="What `run train` runs; `pipeline` runs sft, then this when it is "
        "dpo or grpo (from the SFT model it just trained).")
    from_model: Annotated[str | None, RESOLVED] = Field(
        None, description="The model the run starts from: a store version (`model`, "
        "`model@VERSION`) or a folder (null: base_model; dpo/grpo in the pipeline: the SFT "
        "model). Its lineage is the new version's parent.")
    preferences: Annotated[str | None, ARTIFACT] = Field(
        None, description="dpo: the preferences version (null: the latest).")
    lora: LoraConfig | None = Field(
        None, description="Train LoRA adapters instead of all parameters (null: full).")
    replay: Annotated[ReplayConfig | None, RESOLVED] = Field(
        None, description="Mix rows of earlier training-data versions (sft, dpo; null: off).")
    task_weights: dict[str, float] | None = Field(
        None, description="Resample the train rows so each listed task kind (sft: task_type; "
        "dpo, grpo: the scenario kind) has this share of the listed kinds' rows (null: as they "
        "come). E.g. {tool_selection: 0.35, multi_step_planning: 0.30, ...}.")
    dpo: Annotated[DPOSettings, RESOLVED] = Field(default_factory=DPOSettings)
    grpo: Annotated[GRPOSettings, RESOLVED] = Field(default_factory=GRPOSettings)
    dataset: Annotated[str | None, ARTIFACT] = Field(
        None, description="The sft_dataset version to train on: `sft_dataset@VERSION` or "
        "`sft_dataset@ALIAS` (null: the latest)."
    )
    base_model: Annotated[str, RESOLVED] = Field(
        "embedded", min_length=1, description="Local transformers model folder to fine-tune, or "
        "`embedded` for the bundled SmolLM2-135M-Instruct. Left out of a run config: "
        "llm.student's model (its weights, for a `models:` entry served by an endpoint)."
    )
    sample_form: Literal["messages", "steps"] = Field(
        "messages", description="messages: whole conversations with tools, loss on assistant "
        "tokens only; steps: each agent step's prompt/completion pair in its template's own "
        "format, loss on the completion only."
    )
    chat_template: Annotated[str | None, RESOLVED] = Field(
        None, description="Jinja training chat template file (null: dataset.chat_template, else "
        "the base model's own if it has {% generation %} markers, else TRL's training variant, "
        "else templates/chatml_training.j2 for ChatML models)."
    )
    max_length: int = Field(4096, ge=16, le=1_000_000, description="Sequence length in tokens.")
    epochs: Annotated[float, RESOLVED] = Field(3.0, gt=0, le=1000, description="Passes over the train split.")
    max_steps: Annotated[int | None, RESOLVED] = Field(
        None, ge=1, description="Optimizer steps to run; overrides epochs (null: use epochs)."
    )
    learning_rate: Annotated[float, RESOLVED] = Field(1e-5, gt=0, le=1, description="Peak learning rate.")
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
    gradient_checkpointing: Annotated[bool, UNTRACKED] = Field(
        True, description="Recompute activations in backward (less memory, ~30 % more compute)."
    )
    precision: Annotated[Literal["auto", "bf16", "fp16", "fp32"], RESOLVED] = Field(
        "auto", description="auto: bf16 on GPUs and on CPUs that multiply bf16 natively "
        "(AVX512-BF16 or AMX), fp16 on GPUs without bf16, else fp32 (an AVX2-only CPU emulates "
        "bf16 30-60x slower); the choice and its reason are logged."
    )
    attention: Annotated[Literal["auto", "flash_attention_2", "sdpa", "eager"], RESOLVED] = Field(
        "auto", description="auto: flash_attention_2 when installed (CUDA), else sdpa."
    )
    packing: Annotated[Literal["auto", "on", "off"], RESOLVED] = Field(
        "auto", description="Padding-free packing of samples into max_length sequences. auto: on "
        "with flash attention (no padding, no cross-sample attention), off otherwise (without "
        "variable-length kernels a packed sequence costs attention over its whole length)."
    )
    logging_steps: Annotated[int, UNTRACKED] = Field(10, ge=1, description="Steps between logged losses / progress.")
    eval_steps: Annotated[int, UNTRACKED] = Field(200, ge=1, description="Steps between evaluations on the val split.")
    save_steps: Annotated[int, UNTRACKED] = Field(200, ge=1, description="Steps between checkpoints (for resuming).")
    save_total_limit: Annotated[int, UNTRACKED] = Field(2, ge=1, le=1000, description="Checkpoints kept on disk.")
    keep_checkpoints: Annotated[bool, UNTRACKED] = Field(
        False, description="Keep the run's checkpoints and saved model in its work dir after "
        "the model is published (the store holds a copy either way)."
    )
    deepspeed: Annotated[str, RESOLVED] = Field(
        "zero3", min_length=1, description="DeepSpeed config: a name in models/deepspeed "
        "(zero3, zero3_offload, zero1, zero0) or a path to a DeepSpeed JSON file; `none`: no "
        "DeepSpeed, one process (the plain TRL/HF trainer, fp32 weights with mixed precision)."
    )
    launcher: Annotated[Literal["torchrun", "deepspeed"], UNTRACKED] = Field(
        "torchrun", description="Process launcher. Multi-node runs use `deepspeed` with a hostfile."
    )
    nproc_per_node: Annotated[int, RESOLVED] = Field(
        1, ge=1, le=1024, description="Processes per node: GPUs per node, or CPU processes."
    )
    hostfile: Annotated[str | None, UNTRACKED] = Field(
        None, description="DeepSpeed hostfile (`host slots=N` per line) for multi-node training; "
        "launcher must be `deepspeed`."
    )
    master_port: Annotated[int | None, UNTRACKED] = Field(
        None, ge=1024, le=65535, description="Rendezvous port (null: a free one)."
    )
    cpu_threads_per_process: Annotated[int, UNTRACKED] = Field(
        1, ge=1, le=1024, description="OMP_NUM_THREADS of each process when training on CPU."
    )
    work_dir: Annotated[str, UNTRACKED] = Field(
        "models/runs", min_length=1, description="Where runs keep checkpoints; a run's folder is "
        "named by its dataset version and training settings (not the code version), so a run "
        "restarted with the same inputs resumes from it, also after a code change. One run at a "
        "time per folder: a second is refused, naming the first."
    )
    resume_from: Annotated[str | None, RESOLVED] = Field(
        None, description="A checkpoint to start from when the run's own folder has none: a "
        "`checkpoint-N` folder, or a run folder (its last complete checkpoint), e.g. one left by a "
        "run whose dataset version changed with the code. Recorded in the model's lineage (its "
        "parameters and card); the same world size and DeepSpeed stage are needed."
    )
    cost: Annotated[TrainCostConfig, UNTRACKED] = Field(default_factory=TrainCostConfig)

    @model_validator(mode="after")
    def _processes_and_nodes(self) -> "TrainConfig":
        if self.hostfile is not None and self.launcher != "deepspeed":
            raise ValueError("a hostfile needs launcher `deepspeed` (torchrun starts one node)")
        if self.deepspeed == NO_DEEPSPEED and (self.nproc_per_node != 1 or self.hostfile):
            raise ValueError("deepspeed `none` trains in one process: set nproc_per_node 1 "
                             "and no hostfile (several processes need a DeepSpeed config)")
        return self

    @model_validator(mode="after")
    def _method_options(self) -> "TrainConfig":
        if self.task_weights is not None:
            bad = {k: v for k, v in self.task_weights.items() if v < 0}
            if bad or not any(v > 0 for v in self.task_weights.values()):
                raise ValueError("task_weights: weights must be >= 0 with at least one > 0")
        if self.lora is not None and "lm_head" in self.lora.target_modules:
            raise ValueError("lora.target_modules: lm_head cannot carry an adapter (DPO and "
                             "GRPO read its weight directly)")
        return self
