"""Stage 5b, train_retriever: a tool encoder trained contrastively on (request, tool) pairs from
the scenarios and verified trajectories, published as a versioned ``retriever``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from agentune.config.inputs import ARTIFACT, RESOLVED, UNTRACKED
from agentune.config.strict import Strict

# What the train_retriever stage reads of the run config (see deployment_forms).
READS: tuple[str, ...] = ("train_retriever", "environments")


def candidate_retriever_field(where: str) -> Any:
    """The ``retriever`` setting of a stage that picks candidate tools (``where``: what for)."""
    return Field(
        None, min_length=1,
        description=f"A published `retriever` version (`retriever`: the latest, or "
        f"`retriever@VERSION`) whose encoder joins BM25 to rank the tools {where}: hybrid, by "
        "reciprocal rank fusion. Null: BM25 alone. Off by default: on the demo's held-out "
        "scenarios the 2-block embedded encoder ranks below BM25 (README, Tool retrieval).")


class TrainRetrieverConfig(Strict):
    """train_retriever: pairs (request, each ground-truth tool, a BM25 hard negative) from the
    train split of `scenarios` and from verified `trajectories`, zh and en plus cross-language
    (a Chinese request with the English-only tool text); sentence-transformers with in-batch
    negatives (MultipleNegativesRankingLoss) on a local model folder; `retriever` out."""

    enabled: Annotated[bool, UNTRACKED] = Field(True, description="Train and publish a retriever in the pipeline.")
    scenarios: Annotated[str, ARTIFACT] = Field("scenarios", min_length=1,
                           description="Input artifact: its `train` split gives pairs.")
    trajectories: Annotated[str | None, ARTIFACT] = Field(
        "trajectories", description="Input artifact whose verified trajectories give (query, "
        "tool) pairs; skipped when none is published. Empty: scenarios only.")
    base_model: Annotated[str, RESOLVED] = Field(
        "embedded", min_length=1, description="`embedded` (mean pooling over its last hidden "
        "states), a model folder (a sentence-transformers folder loads as it is), or "
        "`retriever@VERSION` to train further.")
    base_layers: int | None = Field(
        None, ge=1, le=1024, description="Keep only the first N transformer blocks of a base "
        "that is not yet an encoder (faster to train and to embed thousands of tools; null: "
        "all).")
    max_seq_length: int = Field(128, ge=16, le=8192, description="Longest text, in tokens.")
    hard_negatives: int = Field(1, ge=1, le=16,
                                description="BM25 hard negatives (rows) per (request, tool).")
    cross_language: bool = Field(
        True, description="Also pair Chinese requests with the English-only tool texts.")
    epochs: float = Field(1.0, gt=0, le=100, description="Passes over the pairs.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    batch_size: int = Field(16, ge=2, le=4096,
                            description="Pairs per batch: each one's negatives are the others.")
    learning_rate: float = Field(2e-5, gt=0, le=1)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    scale: float = Field(20.0, gt=0, le=100,
                         description="Inverse temperature on cosine similarities in the loss.")
    work_dir: Annotated[str, UNTRACKED] = Field("data/cache/retriever",
                          description="Where a run trains (a folder per version).")
