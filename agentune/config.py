"""The run configuration: one YAML file, validated by pydantic, doubling as the flows' parameters.

Every model forbids unknown keys so a typo in the YAML is an error naming the field instead of a
silently ignored setting. Field descriptions are what the Prefect UI shows beside each form field.
Relative paths are resolved against the current working directory (the project root in every
documented way of running agentune: the CLI, ``make demo`` and Prefect deployments).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


class RunConfig(Strict):
    """A whole agentune run: inputs, roles and endpoints, sizes, ratios, thresholds, store."""

    name: str = Field("run", min_length=1, description="A label for this run, shown in summaries.")
    seed: int = Field(0, description="Seed for every sampling decision of the run.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    queries: CollectQueriesConfig = Field(
        default_factory=CollectQueriesConfig, description="The collect_queries stage."
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
