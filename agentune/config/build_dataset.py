"""Stage 4, build_dataset: dedup, decontamination, splits, mixing, audit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentune.config.inputs import ARTIFACT, FILE, RESOLVED, UNTRACKED
from agentune.config.strict import Strict

# What the build_dataset stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("dataset", "runner", "train.sample_form", "verifier")


class RedisIndexConfig(Strict):
    """Where a near-dup LSH index is kept in Redis, so it persists across processes and versions."""

    host: Annotated[str, UNTRACKED] = Field("127.0.0.1", min_length=1, description="Redis host.")
    port: Annotated[int, UNTRACKED] = Field(6379, ge=1, le=65535, description="Redis port.")
    db: Annotated[int, UNTRACKED] = Field(0, ge=0, le=1_000_000, description="Redis database number.")
    password_env: Annotated[str | None, UNTRACKED] = Field(
        None, description="Name of the environment variable holding the Redis password, if any "
        "(the password itself is never put in a config or artifact)."
    )
    namespace: str = Field(
        "agentune-sft-dedup",
        min_length=1,
        max_length=200,
        description="Key prefix of the index.",
    )
    scope: Literal["version", "shared"] = Field(
        "version",
        description="`version`: one index per sft_dataset version (`<namespace>:<version>:"
        "<kind>`), so a build never drops rows because of another version's rows, and a "
        "re-run of the same version (a resumed or repeated build) finds its own rows and "
        "keeps the same ones. `shared`: one index for every build under the namespace "
        "(`<namespace>:<kind>`): each build deduplicates against every row kept by earlier "
        "builds, which is what you want only when those datasets are trained on together.",
    )


class AugmentConfig(Strict):
    """Rows derived from the train split's verified trajectories (and general rows) that teach
    when to call a tool and when not to: shuffled offers, relevance flips, general rows with
    tools offered, masked names. Seeded; each derived row names its source (`derived_from`) and
    its `derivation`, and is verified like any row. Made in the messages form only (a derived
    row's template steps would need rendering again); val and test rows are never a source.

    The defaults (1 order, no-call share 0.5, every general row offered tools) were chosen on the
    outcome's dev split (tests/benchmarks/outcome_dev.py; configs/outcome.yaml has the figures):
    of the settings tried they gave the most calls after SFT, and with the decision pairs and
    DPO the most calls and declines together."""

    orders: int = Field(
        1, ge=0, le=16, description="Shuffled copies of each calling train row: its offered "
        "tools in a seeded random order (each copy a different order), its calls byte for byte "
        "unchanged, so the position of a tool in the offer is no cue (0: none)."
    )
    no_call_share: float = Field(
        0.5, ge=0, lt=1, description="Share of the train rows that offer tools and call none "
        "(declines, relevance flips, general rows with tools) that relevance flips fill up to: "
        "calling rows whose needed tools are replaced in the offer by other tools, the answer a "
        "decline in the request's language (0: no flips)."
    )
    general_tools: float = Field(
        1.0, ge=0, le=1, description="Share of the train split's general rows offered a seeded "
        "sample of tools, the answer unchanged (no call): chat with tools offered."
    )
    general_tools_count: int = Field(
        4, ge=1, le=64, description="Tools offered to such a general row (fewer when fewer "
        "tools are known)."
    )
    mask_names: bool = Field(
        False, description="Add a copy of each calling train row with its tool and parameter "
        "names replaced by seeded random ones, consistently in the offer, the calls and the "
        "results, so the model must read the descriptions."
    )


class BuildDatasetConfig(Strict):
    """build_dataset: trajectories in; deduplicated, decontaminated, split, mixed with general
    SFT data and audited with the student's tokenizer; `sft_dataset` (Parquet + card) out."""

    trajectories: Annotated[str, ARTIFACT] = Field(
        "trajectories",
        min_length=1,
        description="The trajectories version to read: `trajectories`, `trajectories@ALIAS` or "
        "`trajectories@VERSION`.",
    )
    general_data: Annotated[list[str], FILE] = Field(
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
    benchmark_files: Annotated[list[str], FILE] = Field(
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
    student_model: Annotated[str, RESOLVED] = Field(
        "embedded", min_length=1, description="Local model folder (or `embedded`) whose tokenizer "
        "and chat template audit the data, and which scores losses. Left out of a run config: "
        "llm.student's model, as train.base_model."
    )
    chat_template: Annotated[str | None, FILE] = Field(
        None, description="Jinja chat template file to render samples with (null: the student's "
        "own if it has generation markers, else TRL's training variant, else "
        "templates/chatml_training.j2 for ChatML models)."
    )
    max_length: int = Field(
        4096, ge=16, le=1_000_000, description="Training sequence length in tokens."
    )
    sample_form: Literal["messages", "steps"] | None = Field(
        None, description="The form the data will be trained in, which the audit renders and "
        "the mix counts (steps: an agent row is one example per step, a general row one), so "
        "the ratio holds in training (null: train.sample_form).")
    augment: AugmentConfig = Field(
        default_factory=AugmentConfig, description="Derived rows that teach when to call a tool "
        "and when not to."
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
