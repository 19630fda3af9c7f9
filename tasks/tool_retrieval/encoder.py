"""The dense tool encoder: a local model folder as a sentence-transformers model, trained with
in-batch negatives plus BM25 hard negatives (MultipleNegativesRankingLoss).

A folder that is already a sentence-transformers model (``modules.json``: a published
``retriever`` version, or any encoder on disk) loads as it is; any other transformers folder (the
embedded causal LM by default) gets mean pooling over its last hidden states.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentune.tasks.tool_retrieval.pairs import TrainingPair

ENCODER_FOLDER = "encoder"
"""Where a ``retriever`` version keeps its sentence-transformers folder (under ``__files__``)."""


def keep_first_layers(body: Any, layers: int) -> None:
    """Cut a transformer to its first ``layers`` blocks: a smaller, faster encoder from a deep
    base (the blocks kept are unchanged; training adapts them)."""
    model = body.auto_model
    blocks = getattr(model, "layers", None)
    if blocks is None:
        raise ValueError(f"{type(model).__name__}: no `layers` to cut")
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"base_layers {layers}: the model has {len(blocks)} layers")
    model.layers = blocks[:layers]
    model.config.num_hidden_layers = layers
    if isinstance(getattr(model.config, "layer_types", None), list):
        model.config.layer_types = model.config.layer_types[:layers]


def load_encoder(path: str | Path, *, max_seq_length: int = 128, device: str | None = None,
                 layers: int | None = None) -> Any:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no model folder")
    if (folder / "modules.json").is_file():
        return SentenceTransformer(str(folder), device=device, local_files_only=True)
    # float32: a bf16 checkpoint (the embedded model) would otherwise train in pure bf16.
    body = Transformer(str(folder), max_seq_length=max_seq_length,
                       model_kwargs={"dtype": "float32"})
    tokenizer = body.tokenizer
    if tokenizer.pad_token is None:  # causal LMs often have none; mean pooling masks it out
        tokenizer.pad_token = tokenizer.eos_token
    if layers is not None:
        keep_first_layers(body, layers)
    pooling = Pooling(body.get_embedding_dimension(), "mean")
    return SentenceTransformer(modules=[body, pooling], device=device)


@dataclass(frozen=True)
class EncoderTraining:
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    scale: float = 20.0
    """MultipleNegativesRankingLoss's inverse temperature on cosine similarities."""
    seed: int = 0


def train_encoder(encoder: Any, pairs: Sequence[TrainingPair], out_dir: Path,
                  settings: EncoderTraining) -> list[dict[str, Any]]:
    """Train ``encoder`` in place on (anchor, positive, negative) rows; each batch also uses the
    other rows' positives as negatives (no duplicate texts in a batch). Returns the log."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    if not pairs:
        raise ValueError("no training pairs: the scenarios' train split calls no catalog tool")
    data = Dataset.from_dict({"anchor": [p.anchor for p in pairs],
                              "positive": [p.positive for p in pairs],
                              "negative": [p.negative for p in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out_dir), num_train_epochs=settings.epochs,
        max_steps=settings.max_steps if settings.max_steps else -1,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
        warmup_ratio=settings.warmup_ratio, seed=settings.seed, data_seed=settings.seed,
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
        batch_sampler=BatchSamplers.NO_DUPLICATES, use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    trainer = SentenceTransformerTrainer(
        model=encoder, args=args, train_dataset=data,
        loss=MultipleNegativesRankingLoss(encoder, scale=settings.scale))
    trainer.train()
    return [dict(entry) for entry in trainer.state.log_history]


def pair_accuracy(encoder: Any, pairs: Sequence[TrainingPair]) -> float:
    """Share of pairs whose positive the encoder scores above their hard negative (cosine)."""
    if not pairs:
        raise ValueError("no pairs")

    def embed(texts: list[str]) -> np.ndarray:
        return encoder.encode(texts, convert_to_numpy=True, normalize_embeddings=True,
                              show_progress_bar=False)

    anchors = embed([p.anchor for p in pairs])
    positive = np.sum(anchors * embed([p.positive for p in pairs]), axis=1)
    negative = np.sum(anchors * embed([p.negative for p in pairs]), axis=1)
    return float(np.mean(positive > negative))
