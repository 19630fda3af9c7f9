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
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout in seconds.")
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


class RunConfig(Strict):
    """A whole agentune run: inputs, roles and endpoints, sizes, ratios, thresholds, store."""

    name: str = Field("run", min_length=1, description="A label for this run, shown in summaries.")
    seed: int = Field(0, description="Seed for every sampling decision of the run.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)


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
