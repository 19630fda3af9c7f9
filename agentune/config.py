"""The run configuration: one YAML file, validated by pydantic, doubling as the flows' parameters.

Every model forbids unknown keys so a typo in the YAML is an error naming the field instead of a
silently ignored setting. Field descriptions are what the Prefect UI shows beside each form field.
Relative paths are resolved against the current working directory (the project root in every
documented way of running agentune: the CLI, ``make demo`` and Prefect deployments).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from agentune.strict import Strict
from agentune.tasks.tool_config import ToolsConfig


class RoleConfig(Strict):
    """One LLM role (teacher, judge or student): which model answers and within what limits."""

    provider: Literal["openai", "local"] = Field(
        "local",
        description="`openai`: any OpenAI-compatible HTTP server (OpenAI, vLLM ...). "
        "`local`: in-process transformers with grammar-constrained structured output.",
    )
    model: str = Field(
        "embedded",
        description="Model name sent to the endpoint (openai), or a local model folder / the word "
        "`embedded` for the bundled SmolLM2-135M-Instruct (local).",
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 for vLLM."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Name of the environment variable holding the API key. The key itself is "
        "never put in a config, artifact or log.",
    )
    max_concurrency: int = Field(8, ge=1, le=4096, description="Requests in flight at once.")
    requests_per_minute: int | None = Field(None, ge=1, description="Request rate cap.")
    tokens_per_minute: int | None = Field(
        None, ge=1, description="Token rate cap (prompt estimate + max_tokens per request)."
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Per-request timeout in seconds. Unset: 120 s for openai; none for local, "
        "where a request waits for its batch and generation time grows with the batch.",
    )
    max_retries: int = Field(
        5, ge=0, le=50, description="Retries on 429, 5xx, timeouts and broken responses."
    )
    backoff_base_s: float = Field(
        1.0, ge=0, description="First backoff; doubles per retry, with full jitter."
    )
    backoff_max_s: float = Field(60.0, ge=0, description="Longest single backoff wait.")
    max_retry_after_s: float = Field(
        300.0, ge=0, description="Longest Retry-After wait honoured; a server asking for a longer "
        "one fails the call at once, as unreachable, rather than stall the run.",
    )
    price_input_per_1m: float | None = Field(
        None, ge=0, description="Price per million prompt tokens, for cost accounting."
    )
    price_output_per_1m: float | None = Field(
        None, ge=0, description="Price per million completion tokens, for cost accounting."
    )
    default_max_tokens: int = Field(
        512, ge=1, description="max_tokens used when a request does not set one."
    )
    batch_size: int = Field(
        8, ge=1, le=512, description="local: requests generated together in one batch."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="local: weights dtype (auto = bf16 where supported, else fp32)."
    )
    device: str = Field("auto", description="local: torch device (auto = cuda if present, else cpu).")

    @property
    def request_timeout_s(self) -> float | None:
        if self.timeout_s is not None:
            return self.timeout_s
        return 120.0 if self.provider == "openai" else None

    @model_validator(mode="after")
    def _endpoint_for_openai(self) -> "RoleConfig":
        if self.provider == "openai" and self.model == "embedded":
            raise ValueError("provider 'openai' needs `model` set to the endpoint's model name")
        return self


class BudgetConfig(Strict):
    """A cap on what one run may spend across all roles; reaching it stops the run cleanly."""

    max_tokens: int | None = Field(None, ge=1, description="Prompt + completion tokens, all roles.")
    max_cost: float | None = Field(
        None, ge=0, description="Money, in the unit of the configured prices."
    )


class LLMConfig(Strict):
    """The roles and the gateway's shared settings."""

    teacher: RoleConfig = Field(default_factory=RoleConfig, description="Writes data.")
    judge: RoleConfig = Field(default_factory=RoleConfig, description="Scores data.")
    student: RoleConfig = Field(default_factory=RoleConfig, description="The model being tuned.")
    cache: bool = Field(True, description="Persist responses so no request is paid for twice.")
    cache_dir: str = Field("data/cache", description="Folder of the persistent response cache.")
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    global_concurrency_limit: bool = Field(
        False,
        description="On a Prefect server, also take a slot of the server's global concurrency "
        "limit `llm-<role>` around each paid call, so concurrent deployments share one rate "
        "limit (`agentune ui` creates the limits). Ignored without a server API.",
    )


class StoreConfig(Strict):
    root: str = Field("data/artifacts", description="Root folder of the versioned artifact store.")


class CollectQueriesConfig(Strict):
    """collect_queries: seed queries and a tool catalog in; cleaned, deduplicated queries grouped
    into similar-query sets, thin sets expanded by the teacher, candidate tools per query."""

    seed_queries: str = Field(
        "data/demo/queries.jsonl",
        min_length=1,
        description="Seed queries: a .jsonl, .json, .csv, .tsv or .parquet file, or a folder "
        "written by Hugging Face `datasets` save_to_disk.",
    )
    tool_catalog: str = Field(
        "data/demo/tools.yaml",
        min_length=1,
        description="Tool catalog in the OpenAI function-tool schema (.yaml, .yml, .json, .jsonl).",
    )
    text_column: str = Field("text", min_length=1, description="Column holding the query text.")
    scenario_column: str | None = Field(
        "scenario", description="Optional column naming the query's scenario (null: none)."
    )
    tools_column: str | None = Field(
        "tools",
        description="Optional column listing the tools a query needs ([] = no tool needed; "
        "absent = unknown). In CSV: a JSON list or names separated by ';'.",
    )
    id_column: str | None = Field(
        "id", description="Optional column of unique query ids; without it ids come from the text."
    )
    split: str | None = Field(
        None, description="Split to read from a datasets folder holding several splits."
    )
    unicode_form: Literal["NFKC", "NFC"] = Field(
        "NFKC",
        description="NFKC folds full-width letters and digits (full-width punctuation is kept); "
        "NFC only composes characters.",
    )
    min_chars: int = Field(4, ge=1, le=10_000, description="Shorter queries are rejected.")
    max_chars: int = Field(1000, ge=1, le=100_000, description="Longer queries are rejected.")
    languages: list[str] = Field(
        default_factory=lambda: ["zh", "en"],
        description="Language tags kept (zh, en, ja, ko, und); an empty list keeps every language.",
    )
    pii_action: Literal["scrub", "drop"] = Field(
        "scrub",
        description="scrub: replace e-mails, phones, ID and card numbers by [EMAIL], [PHONE], "
        "[ID_NUMBER], [CARD_NUMBER]; drop: reject queries that contain any.",
    )
    near_dup_threshold: float = Field(
        0.6,
        gt=0,
        le=1,
        description="Character n-gram Jaccard similarity at or above which a query is a near "
        "duplicate of one kept before it.",
    )
    near_dup_ngram: int = Field(
        2, ge=1, le=16, description="Character n-gram length for near-dup (2 suits short Chinese)."
    )
    near_dup_num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    near_dup_min_recall: float = Field(
        0.99,
        gt=0,
        lt=1,
        description="LSH bands/rows are chosen so a pair exactly at the threshold is proposed "
        "with at least this probability (candidates are then verified exactly).",
    )
    set_size: int = Field(
        5, ge=1, le=100, description="Queries per similar-query set (one Meta-Agent seed each)."
    )
    sets_by_language: bool = Field(
        True, description="Keep each query set to one language (else only to one scenario)."
    )
    expand: bool = Field(True, description="Let the teacher top up sets smaller than set_size.")
    expansion_max_new: int = Field(
        200, ge=0, le=1_000_000, description="Most new queries expansion may add in one run."
    )
    expansion_rounds: int = Field(
        2,
        ge=1,
        le=5,
        description="Requests per thin set at most: a later round asks again for what cleaning "
        "and dedup dropped.",
    )
    expansion_temperature: float = Field(
        0.9, ge=0, le=2, description="Teacher sampling temperature for expansion."
    )
    expansion_max_chars: int = Field(
        160,
        ge=8,
        le=2000,
        description="Longest new query the teacher may write, in characters (never more than "
        "max_chars).",
    )
    tools_min: int = Field(3, ge=0, le=1000, description="Smallest candidate tool subset.")
    tools_max: int = Field(8, ge=1, le=1000, description="Largest candidate tool subset.")
    likely_tools_max: int = Field(
        3,
        ge=1,
        le=50,
        description="Most tools taken as likely needed for a query without hints (from its "
        "scenario's usual tools and BM25 retrieval).",
    )
    hard_distractor_ratio: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of distractors taken from the query's top BM25 hits (the rest random).",
    )
    retrieval_pool: int = Field(
        50, ge=1, le=1000, description="BM25 hits considered per query."
    )

    @model_validator(mode="after")
    def _ranges(self) -> "CollectQueriesConfig":
        if self.min_chars > self.max_chars:
            raise ValueError("min_chars must not exceed max_chars")
        if self.tools_min > self.tools_max:
            raise ValueError("tools_min must not exceed tools_max")
        return self


class RedisIndexConfig(Strict):
    """Where a near-dup LSH index is kept in Redis, so it persists across processes and versions."""

    host: str = Field("127.0.0.1", min_length=1, description="Redis host.")
    port: int = Field(6379, ge=1, le=65535, description="Redis port.")
    db: int = Field(0, ge=0, le=1_000_000, description="Redis database number.")
    password_env: str | None = Field(
        None, description="Name of the environment variable holding the Redis password, if any "
        "(the password itself is never put in a config or artifact)."
    )
    namespace: str = Field(
        "agentune-sft-dedup",
        min_length=1,
        max_length=200,
        description="Key prefix of the index. Builds sharing a namespace deduplicate against "
        "every row kept by earlier builds under it.",
    )


class BuildDatasetConfig(Strict):
    """build_dataset: trajectories in; deduplicated, decontaminated, split, mixed with general
    SFT data and audited with the student's tokenizer; `sft_dataset` (Parquet + card) out."""

    trajectories: str = Field(
        "trajectories",
        min_length=1,
        description="The trajectories version to read: `trajectories`, `trajectories@ALIAS` or "
        "`trajectories@VERSION`.",
    )
    general_data: list[str] = Field(
        default_factory=lambda: ["data/demo/general.jsonl"],
        description="General SFT data mixed in against forgetting: .jsonl, .json or .parquet "
        "files or Hugging Face datasets folders, alpaca (instruction/input/output) or "
        "ShareGPT/messages rows.",
    )
    general_split: str | None = Field(
        None, description="Split to read from a datasets folder holding several splits."
    )
    near_dup_threshold: float = Field(
        0.8, gt=0, le=1, description="Jaccard similarity at or above which two samples are "
        "near duplicates (user and assistant content; the tool schemas are left out)."
    )
    near_dup_word_ngram: int = Field(
        5, ge=1, le=32, description="Word n-gram length for Latin-script text."
    )
    near_dup_char_ngram: int = Field(
        5, ge=1, le=32, description="Character n-gram length for Chinese (CJK) text."
    )
    near_dup_num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    near_dup_min_recall: float = Field(
        0.99, gt=0, lt=1, description="LSH bands/rows are chosen so a pair exactly at the "
        "threshold is proposed with at least this probability; candidates are verified exactly."
    )
    near_dup_redis: RedisIndexConfig | None = Field(
        None, description="Keep the LSH index in Redis (null: in memory, for this build only)."
    )
    decontaminate: bool = Field(
        True, description="Drop train/val rows whose query is a near duplicate of a test-split "
        "query or of a benchmark query."
    )
    benchmark_files: list[str] = Field(
        default_factory=list,
        description="JSONL files of evaluation queries to decontaminate against (e.g. "
        "KAgentBench's benchmark_eval.jsonl).",
    )
    benchmark_query_field: str = Field(
        "query", min_length=1, description="Field holding the query in benchmark files."
    )
    decontam_threshold: float = Field(
        0.6, gt=0, le=1, description="Character n-gram Jaccard similarity of two queries at or "
        "above which a training row counts as contaminated."
    )
    decontam_ngram: int = Field(
        2, ge=1, le=16, description="Character n-gram length for comparing queries."
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of query sets (and general rows) in the val split."
    )
    test_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of query sets (and general rows) in the test split."
    )
    agent_to_general: float = Field(
        5.0, gt=0, le=1000, description="Agent rows per general row (MAT: Agent 5 : general 1)."
    )
    mix_by: Literal["samples", "tokens"] = Field(
        "samples", description="Whether the ratio counts samples or tokens (under the student's "
        "chat template)."
    )
    coreset_size: int | None = Field(
        None, ge=1, description="Most agent rows in the train split; more are cut down by "
        "`selection` within each task type x template source stratum (null: no cap)."
    )
    selection: Literal["random", "diversity", "loss_topk", "hybrid"] = Field(
        "random", description="How rows are chosen where a pool holds more than needed (general "
        "rows for the ratio, agent rows under coreset_size): random; diversity (farthest-first "
        "over n-gram vectors); loss_topk (highest loss first); hybrid (alternating)."
    )
    hybrid_loss_share: float = Field(
        0.5, ge=0, le=1, description="hybrid: share of picks taken by loss, the rest by diversity."
    )
    loss_from: Literal["student", "unigram"] = Field(
        "student", description="Per-row loss for loss_topk/hybrid: the student model's mean "
        "assistant-token loss, or a unigram-surprisal proxy over the pool (no model run)."
    )
    student_model: str = Field(
        "embedded", min_length=1, description="Local model folder (or `embedded`) whose tokenizer "
        "and chat template audit the data, and which scores losses."
    )
    chat_template: str | None = Field(
        None, description="Jinja chat template file to render samples with (null: the student's "
        "own if it has generation markers, else TRL's training variant, else "
        "templates/chatml_training.j2 for ChatML models)."
    )
    max_length: int = Field(
        4096, ge=16, le=1_000_000, description="Training sequence length in tokens."
    )
    overlength: Literal["truncate", "drop"] = Field(
        "truncate", description="Rows over max_length: keep them (the trainer truncates; only "
        "tokens within max_length count as trained) or drop them."
    )

    @model_validator(mode="after")
    def _fractions(self) -> "BuildDatasetConfig":
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must leave room for train")
        return self


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
        "named by the model version it will publish, so a restarted run resumes from it."
    )
    cost: TrainCostConfig = Field(default_factory=TrainCostConfig)

    @model_validator(mode="after")
    def _multi_node(self) -> "TrainConfig":
        if self.hostfile is not None and self.launcher != "deepspeed":
            raise ValueError("a hostfile needs launcher `deepspeed` (torchrun starts one node)")
        return self


AgentProtocolName = Literal["react", "autogpt", "toolllama", "modelscope", "kuaiagent"]


class BuildTemplatesConfig(Strict):
    """build_templates: the Meta-Agent writes candidate agent prompt templates from query sets;
    a structural filter and judged prompt pairs (benchmark vs candidate) decide which are kept."""

    queries: str = Field(
        "queries", min_length=1,
        description="Input query sets: `queries` (latest) or `queries@VERSION`.",
    )
    tools: str = Field(
        "tools", min_length=1,
        description="Input tool catalog: `tools` (latest) or `tools@VERSION`.",
    )
    max_sets: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Query sets that seed the Meta-Agent, drawn with the run seed, languages "
        "alternating (null: every set).",
    )
    candidates_per_set: int = Field(
        2, ge=1, le=100, description="Candidate templates the Meta-Agent writes per query set."
    )
    protocols: list[AgentProtocolName] = Field(
        default_factory=lambda: ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"],
        min_length=1,
        description="Output formats a candidate's Format section may use (rotated over "
        "candidates).",
    )
    template_languages: list[Literal["zh", "en"]] = Field(
        default_factory=lambda: ["zh", "en"],
        min_length=1,
        description="Languages candidates are written in: a set's first candidate takes the set's "
        "language when listed, later ones rotate through the list.",
    )
    section_max_chars: int = Field(
        500, ge=40, le=8000,
        description="Longest Profile/Tools/Goal/Memory/Format text the Meta-Agent may write, in "
        "characters (Instruction may use twice this).",
    )
    meta_temperature: float = Field(
        1.0, ge=0, le=2, description="Teacher sampling temperature for the Meta-Agent."
    )
    near_dup_threshold: float = Field(
        0.7, gt=0, le=1,
        description="Character 5-gram Jaccard similarity of the written sections at or above which "
        "a candidate is a near duplicate of a template kept before it (benchmarks included).",
    )
    benchmark_templates: list[AgentProtocolName] = Field(
        default_factory=lambda: ["autogpt", "toolllama"],
        min_length=1,
        description="Proven templates each candidate is compared with (one prompt pair per "
        "benchmark template and judged query).",
    )
    queries_per_candidate: int = Field(
        3, ge=1, le=100,
        description="N: queries of the candidate's set judged per benchmark template.",
    )
    epsilon: float = Field(
        0.0, ge=-9, le=9,
        description="An instance is kept when score_candidate - score_benchmark > epsilon "
        "(scores 1-10, each the mean of both judging orders).",
    )
    threshold: float = Field(
        6.0, ge=1, le=10,
        description="A template is kept when the mean of its candidate scores >= threshold and at "
        "least one of its instances was kept.",
    )
    answer_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest teacher answer to a rendered agent prompt."
    )
    answer_temperature: float = Field(
        0.0, ge=0, le=2, description="Teacher temperature when answering the prompt pairs."
    )
    rationale_max_chars: int = Field(
        400, ge=20, le=4000, description="Longest rationale the judge may write per answer."
    )
    current_time: datetime = Field(
        datetime(2025, 6, 2, 9, 30),
        description="The `current time` shown in judged prompts; fixed so that a re-run sends the "
        "same requests (and hits the response cache).",
    )

    @model_validator(mode="after")
    def _distinct_lists(self) -> "BuildTemplatesConfig":
        for name in ("protocols", "template_languages", "benchmark_templates"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists an entry twice: {values}")
        return self


TaskTypeName = Literal["tool_selection", "multi_step_planning", "timing_decision", "tool_retrieval"]


class SynthesisConfig(Strict):
    """synthesize: Query x Tools x Template combinations answered step by step by the teacher
    (plan -> tool call -> execute -> observe ... -> conclude), gated, in two forms."""

    queries: str = Field(
        "queries", min_length=1,
        description="Input queries: `queries` (latest) or `queries@VERSION`.",
    )
    catalog: str = Field(
        "tools", min_length=1,
        description="Input tool catalog: `tools` (latest) or `tools@VERSION`.",
    )
    templates: str = Field(
        "templates", min_length=1,
        description="Input templates: `templates` (latest) or `templates@VERSION`; its kept "
        "planner templates are used.",
    )
    templates_per_query: int = Field(
        3, ge=1, le=100, description="Templates each sampled query is rendered under."
    )
    max_combinations: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Most query x template combinations (null: every query, templates_per_query "
        "times).",
    )
    max_uses_per_template: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Most combinations one template is used in (null: no cap; use is balanced "
        "across templates either way).",
    )
    task_weights: dict[TaskTypeName, float] = Field(
        default_factory=lambda: {"tool_selection": 0.35, "multi_step_planning": 0.30,
                                 "timing_decision": 0.20, "tool_retrieval": 0.15},
        description="Share of combinations per task type. tool_selection: the query's tool subset "
        "(needed tools + distractors); multi_step_planning: queries needing several tools; "
        "timing_decision: queries needing no tool (the right step is to finish at once); "
        "tool_retrieval: the needed tools hidden in a large subset. A type with no eligible query "
        "gives its share to the others.",
    )
    retrieval_tools: int = Field(
        16, ge=2, le=10_000, description="Tools offered in a tool_retrieval combination."
    )
    max_steps: int = Field(
        5, ge=1, le=50,
        description="Planning steps allowed, the finishing one included; a trajectory that has "
        "not finished by then is rejected (step_cap).",
    )
    max_step_retries: int = Field(
        2, ge=0, le=20,
        description="Times an invalid step (unreadable, unknown tool, bad arguments, repeated "
        "call) is asked again, with the problem named; each failure is recorded in `rejects`.",
    )
    structured_output: Literal["json_protocols", "all", "off"] = Field(
        "json_protocols",
        description="Constrain the teacher's step answers with a JSON schema (one branch per "
        "offered tool, its arguments' schema inside). json_protocols: for the JSON formats "
        "(AutoGPT, KuaiAgent), whose answer is that JSON; all: also for the text formats, whose "
        "step is then rendered in the template's format (for weak teachers such as the embedded "
        "model); off: free text everywhere.",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Teacher sampling temperature.")
    step_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest teacher answer for one planning step."
    )
    answer_max_tokens: int = Field(
        512, ge=16, le=32_768, description="Longest final answer (concluder or finish step)."
    )
    text_max_chars: int = Field(
        300, ge=16, le=20_000,
        description="Longest thought / string argument allowed by the structured-output schema.",
    )
    answer_max_chars: int = Field(
        1200, ge=16, le=100_000,
        description="Longest final answer allowed by the structured-output schema.",
    )
    min_answer_chars: int = Field(
        2, ge=1, le=10_000,
        description="A final answer shorter than this (whitespace stripped) is empty_answer.",
    )
    require_tool_call: bool = Field(
        True,
        description="Reject trajectories of tool-needing task types that never call a tool "
        "(no_tool_call), and timing_decision ones that call a tool (unneeded_tool_call).",
    )
    judge: bool = Field(
        True, description="Let the judge score each final answer; below min_judge_score: off_topic."
    )
    min_judge_score: float = Field(
        6.0, ge=1, le=10, description="Lowest judge score (1-10) an accepted trajectory may have."
    )
    judge_rationale_max_chars: int = Field(
        300, ge=20, le=4000, description="Longest rationale the judge may write."
    )
    concurrency: int = Field(
        8, ge=1, le=4096,
        description="Trajectories in progress at once (the gateway still bounds LLM calls).",
    )
    current_time: datetime = Field(
        datetime.fromisoformat("2025-06-02T09:30:00+08:00"),
        description="The clock of every trajectory: the time its prompts show and the date and "
        "simulated tools read (it takes precedence over tools.now). Fixed, so a re-run sends the "
        "same requests (cache hits).",
    )
    work_dir: str = Field(
        "data/cache/synthesis", min_length=1,
        description="Where a running synthesis checkpoints each finished trajectory, in a folder "
        "named by the trajectories version it will publish; a killed run resumes from it.",
    )
    keep_checkpoints: bool = Field(
        False, description="Keep the checkpoint folder after the version is published."
    )
    tools: ToolsConfig = Field(
        default_factory=ToolsConfig,
        description="How the catalog's tools are executed: real, HTTP or simulated, with limits.",
    )

    @model_validator(mode="after")
    def _checks(self) -> "SynthesisConfig":
        if any(w < 0 for w in self.task_weights.values()) or sum(self.task_weights.values()) <= 0:
            raise ValueError("task_weights must be >= 0 with a positive sum")
        if self.current_time.tzinfo is None:
            raise ValueError("current_time needs a UTC offset, e.g. 2025-06-02T09:30:00+08:00")
        return self


class EvalModelConfig(Strict):
    """One model the evaluate stage answers the benchmark with."""

    label: str = Field(
        min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.+-]+$",
        description="Its name in the report (base, tuned ...).",
    )
    model: str = Field(
        min_length=1,
        description="`embedded`, a local transformers folder, a store version of a trained "
        "model (`model`, `model@latest`, `model@VERSION`), or (provider openai) the model name "
        "the endpoint serves.",
    )
    provider: Literal["local", "openai"] = Field(
        "local", description="local: in-process transformers (batched); openai: any "
        "OpenAI-compatible endpoint, e.g. a vLLM server serving the checkpoint.",
    )
    base_url: str | None = Field(None, description="openai: the endpoint's base URL.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai: name of the environment variable with the key."
    )
    tokenizer: str | None = Field(
        None, description="openai: a local tokenizer folder (or `embedded`) to count prompt "
        "tokens for the memory cut; null: count characters (3 per token). Local models use "
        "their own.",
    )
    batch_size: int = Field(8, ge=1, le=512, description="local: prompts generated together.")
    max_concurrency: int = Field(16, ge=1, le=4096, description="Requests in flight at once.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="local: weights dtype."
    )
    device: str = Field("auto", description="local: torch device (auto = cuda if present).")
    timeout_s: float | None = Field(None, gt=0, description="Per-request timeout in seconds.")
    optional: bool = Field(
        False, description="Leave it out of the report, saying so, when it does not exist yet "
        "(e.g. no `model` version has been trained).",
    )


class HumanEvalConfig(Strict):
    """Human review of sampled answers (seed rubric: 1-5, 4-5 usable, 0 for a violation)."""

    sample_size: int = Field(
        0, ge=0, le=100_000, description="Prompts sampled for review; every model's answer to "
        "each becomes one blind row of the sheet (0: no sheet).",
    )
    filled_sheet: str | None = Field(
        None, description="A reviewed sheet (.csv or .parquet) to import: its usable rate joins "
        "the report beside the automatic scores.",
    )


class EvaluateConfig(Strict):
    """evaluate: the held-out benchmark (and/or a KAgentBench file) answered by every listed
    model, scored exactly as KAgentBench scores, plus the tool-use metrics; `eval_report` out."""

    heldout: bool = Field(
        True, description="Build agentune's held-out benchmark from the sft_dataset test split."
    )
    dataset: str | None = Field(
        None, description="The sft_dataset version for the held-out benchmark (null: latest)."
    )
    templates: str | None = Field(
        None, description="The templates version unseen templates are drawn from (null: the one "
        "the dataset descends from, else the latest).",
    )
    benchmark_templates: list[AgentProtocolName] = Field(
        default_factory=lambda: ["react", "autogpt", "toolllama", "modelscope", "kuaiagent"],
        description="Benchmark templates every held-out prompt is rendered with.",
    )
    unseen_templates: int = Field(
        2, ge=0, le=1000, description="Meta-Agent templates never used in training that every "
        "held-out prompt is also rendered with.",
    )
    max_queries: int | None = Field(
        None, ge=1, description="Test-split queries in the held-out benchmark (null: all)."
    )
    max_profile: int | None = Field(
        None, ge=0, description="General test rows taken as profile samples (null: all)."
    )
    kagentbench_file: str | None = Field(
        None, description="A KAgentBench benchmark_eval.jsonl to evaluate on as well (users "
        "bring it: it is on Hugging Face only).",
    )
    kagentbench_max_per_type: int | None = Field(
        None, ge=1, description="Samples of each type taken from the KAgentBench file, in file "
        "order (null: all).",
    )
    models: list[EvalModelConfig] = Field(
        default_factory=lambda: [EvalModelConfig(label="base", model="embedded"),
                                 EvalModelConfig(label="tuned", model="model@latest",
                                                 optional=True)],
        min_length=1, description="The models compared; the first is the baseline.",
    )
    temperature: float = Field(0.1, ge=0, le=2, description="Sampling temperature.")
    top_p: float = Field(0.75, gt=0, le=1, description="Nucleus sampling.")
    top_k: int = Field(40, ge=1, le=100_000, description="Top-k sampling.")
    max_tokens: int = Field(512, ge=1, le=32_768, description="Longest answer, in tokens.")
    max_prompt_tokens: int = Field(
        3096, ge=64, le=1_000_000, description="Longer prompts are cut in the middle of their "
        "memory (KAgentBench's inference: 3096).",
    )
    parser: Literal["official", "agentune"] = Field(
        "official", description="official: read answers exactly as KAgentBench's script; "
        "agentune: the project's tolerant parsers.",
    )
    quirks: Literal["official", "fixed"] = Field(
        "official", description="official: reproduce the script's reuse of the previous "
        "template's parse for an empty ReACT answer or an unknown key; fixed: do not.",
    )
    tokenizer: Literal["auto", "punkt", "line"] = Field(
        "auto", description="ROUGE tokenisation: auto = NLTK punkt when installed, else one "
        "line per text.",
    )
    success_rouge: float = Field(
        0.5, ge=0, le=1, description="ROUGE-L a final answer needs for end-to-end success."
    )
    current_time: datetime = Field(
        datetime(2025, 6, 2, 9, 30), description="The current time held-out prompts show "
        "(fixed, so a rebuild gives the same prompts and hits the response cache).",
    )
    human_eval: HumanEvalConfig = Field(default_factory=HumanEvalConfig)

    @model_validator(mode="after")
    def _inputs(self) -> "EvaluateConfig":
        if not self.heldout and not self.kagentbench_file:
            raise ValueError("nothing to evaluate on: set heldout true or a kagentbench_file")
        labels = [m.label for m in self.models]
        if len(set(labels)) != len(labels):
            raise ValueError(f"model labels must be distinct: {labels}")
        if len(set(self.benchmark_templates)) != len(self.benchmark_templates):
            raise ValueError(f"benchmark_templates lists an entry twice: "
                             f"{self.benchmark_templates}")
        return self


class RunnerConfig(Strict):
    """Where the CPU-bound work of a stage runs (tool selection of collect_queries, near-dup
    signatures of build_dataset): in the flow's process, or mapped over chunks on a Dask
    cluster through prefect-dask."""

    kind: Literal["default", "dask"] = Field(
        "default", description="`default`: in process. `dask`: prefect-dask's DaskTaskRunner."
    )
    address: str | None = Field(
        None, description="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786. "
        "Unset: a local cluster for the run.",
    )
    n_workers: int = Field(2, ge=1, le=1024, description="Workers of the local cluster.")
    threads_per_worker: int = Field(1, ge=1, le=256, description="Threads per local worker.")
    chunk_size: int = Field(
        256, ge=1, le=1_000_000, description="Queries per tool-selection task on Dask (near-dup "
        "signatures go 2,048 samples a task)."
    )


class RunConfig(Strict):
    """A whole agentune run: inputs, roles and endpoints, sizes, ratios, thresholds, store."""

    name: str = Field("run", min_length=1, description="A label for this run, shown in summaries.")
    seed: int = Field(0, description="Seed for every sampling decision of the run.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    queries: CollectQueriesConfig = Field(
        default_factory=CollectQueriesConfig, description="The collect_queries stage."
    )
    templates: BuildTemplatesConfig = Field(
        default_factory=BuildTemplatesConfig, description="The build_templates stage."
    )
    synthesis: SynthesisConfig = Field(
        default_factory=SynthesisConfig, description="The synthesize stage."
    )
    dataset: BuildDatasetConfig = Field(
        default_factory=BuildDatasetConfig, description="The build_dataset stage."
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="The train stage.")
    evaluate: EvaluateConfig = Field(
        default_factory=EvaluateConfig, description="The evaluate stage."
    )
    runner: RunnerConfig = Field(
        default_factory=RunnerConfig, description="Where CPU-bound stage work runs."
    )


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the field."""


def load_config(path: str | Path) -> RunConfig:
    """Read and validate a run config YAML file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from None
