"""build_preferences: preference pairs for DPO, from synthesis attempts and the student's own
rollouts, ranked by the reward registry (``reward``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentune.config.inputs import ARTIFACT, FILE, RESOLVED, UNTRACKED
from agentune.config.strict import Strict

# What the build_preferences stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("preferences", "environments", "reward", "verifier", "llm",
                          "synthesis.user_max_chars", "synthesis.system_prompt",
                          "synthesis.tool_descriptions")


class StudentRolloutsConfig(Strict):
    """The student's own rollouts on training scenarios: k samples per scenario, each verified
    and scored by the reward; pairs are drawn from the samples of one scenario."""

    enabled: bool = Field(
        False, description="Roll the student out (its samples become pairs beside the "
        "synthesis attempts').")
    provider: Literal["local", "openai"] = Field(
        "local", description="local: in-process transformers; openai: an OpenAI-compatible "
        "endpoint serving the student (e.g. vLLM with --tool-call-parser hermes).")
    model: Annotated[str, RESOLVED] = Field(
        "model", min_length=1, description="local: a store version of a trained model "
        "(`model`, `model@latest`, `model@VERSION`), a local transformers folder, or `embedded`; "
        "openai: the model name the endpoint serves.")
    base_url: Annotated[str | None, UNTRACKED] = Field(None, description="openai: the endpoint's base URL.")
    api_key_env: Annotated[str, UNTRACKED] = Field(
        "OPENAI_API_KEY", description="openai: name of the environment variable with the key.")
    samples: int = Field(4, ge=2, le=64, description="k: rollouts per scenario (sampled).")
    temperature: float = Field(1.0, gt=0, le=2, description="Sampling temperature of the rollouts.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling (null: off).")
    max_scenarios: int | None = Field(
        None, ge=1, description="Training scenarios rolled out, a seeded spread over kinds "
        "(null: all).")
    max_steps: int = Field(6, ge=1, le=64, description="Model turns per rollout.")
    max_user_turns: int = Field(1, ge=0, le=16, description="Replies of the simulated user.")
    max_tokens: int = Field(256, ge=8, le=32_768, description="Longest model turn, in tokens.")
    batch_size: int = Field(8, ge=1, le=512, description="Prompts generated together (local).")
    max_concurrency: Annotated[int, UNTRACKED] = Field(8, ge=1, le=4096, description="Rollouts in flight at once.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype of the local student"
        " (auto = bf16 where the CPU or GPU multiplies bf16 natively (a CPU with AVX512-BF16 or "
        "AMX), else fp32; the choice and its reason are logged at load).")
    device: str = Field("auto", description="Torch device of the local student.")
    chat_template: Annotated[str | None, FILE] = Field(
        None, description="The chat template for a student whose own renders no tools (null: "
        "templates/chatml_training.j2). A trained model version uses its own.")


class BuildPreferencesConfig(Strict):
    """build_preferences: `attempts` (and the student's rollouts) in; `preferences` out: pairs
    that share the conversation up to one decision and differ there, the higher-reward side
    chosen."""

    attempts: Annotated[str | None, ARTIFACT] = Field(
        None, description="The attempts version (null: the latest; none published: no pairs "
        "from synthesis, saying so).")
    scenarios: Annotated[str | None, ARTIFACT] = Field(
        None, description="The scenarios version the student is rolled out on and custom "
        "rewards read (null: the one the attempts descend from, else the latest).")
    from_attempts: bool = Field(True, description="Pair the synthesis attempts of a scenario.")
    dataset: Annotated[str | None, ARTIFACT] = Field(
        None, description="The sft_dataset version whose train rows give the decision pairs "
        "(null: the latest; none published: no decision pairs, saying so).")
    from_dataset: bool = Field(
        True, description="Pairs for the decision to call a tool or not, from the sft_dataset's "
        "train rows: a decline (relevance flips among them) over a call, the right call over a "
        "call of a distractor tool.")
    mirror_flips: bool = Field(
        False, description="Also each relevance flip's mirror: its source's prompt (the needed "
        "tool offered), the source's call over the flip's decline. Off: on the outcome's dev "
        "split, DPO at 2e-5 with mirrors gave calls 31.6 and declines 6.2 (pass@1), without "
        "them 21.1 and 62.5.")
    student: StudentRolloutsConfig = Field(default_factory=StudentRolloutsConfig)
    min_margin: float = Field(
        0.1, ge=0, description="Smallest reward difference between chosen and rejected; closer "
        "pairs are not preferences, and are counted as skipped.")
    max_pairs_per_scenario: int = Field(
        8, ge=1, le=10_000, description="Pairs kept per scenario and source, the widest "
        "margins first (a scenario with many attempts gives quadratically many pairs).")
    val_ratio: float = Field(
        0.0, ge=0, lt=1, description="Share of scenarios whose pairs form the val split "
        "(seeded; a scenario's pairs stay together).")
