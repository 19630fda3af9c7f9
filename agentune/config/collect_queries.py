"""Stage 1, collect_queries: seed queries and a tool catalog in; query sets out."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentune.config.inputs import ARTIFACT, FILE
from agentune.config.strict import Strict
from agentune.config.train_retriever import candidate_retriever_field

# What the collect_queries stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("queries", "environments.catalog", "runner", "llm.teacher",
                          "llm.judge")


class CollectQueriesConfig(Strict):
    """collect_queries: seed queries and a tool catalog in; cleaned, deduplicated queries grouped
    into similar-query sets, thin sets expanded by the teacher, candidate tools per query."""

    seed_queries: Annotated[str, FILE] = Field(
        "data/demo/queries.jsonl",
        min_length=1,
        description="Seed queries: a .jsonl, .json, .csv, .tsv or .parquet file, or a folder "
        "written by Hugging Face `datasets` save_to_disk.",
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
    expansion_min_judge_score: float | None = Field(
        None, ge=1, le=10,
        description="With a value: the judge scores each expanded query 1-10 as a realistic "
        "request for its set, and those below are dropped (expansion_judged_low). Empty: no "
        "judge (the script, language and debris checks still apply).")
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
        50, ge=1, le=1000, description="Retrieval hits considered per query."
    )
    retriever: Annotated[str | None, ARTIFACT] = candidate_retriever_field(
        "a query likely needs and its hard distractors")

    @model_validator(mode="after")
    def _ranges(self) -> "CollectQueriesConfig":
        if self.min_chars > self.max_chars:
            raise ValueError("min_chars must not exceed max_chars")
        if self.tools_min > self.tools_max:
            raise ValueError("tools_min must not exceed tools_max")
        return self
