"""Coreset selection (random, diversity, loss_topk, hybrid) as selection orders.

Each strategy turns a pool of samples into an order of picks, produced lazily, so a caller takes
exactly as many as it needs (a count, or a token budget) and any prefix is a valid selection:

- ``random``: a seeded shuffle;
- ``loss_topk``: highest loss first (the hardest samples for the student);
- ``diversity``: farthest-first traversal (greedy k-center) by cosine similarity of word and
  character bigram vectors: each pick is the sample least similar to everything picked so far;
- ``hybrid``: loss and diversity picks alternating (``loss_share`` of them by loss), every pick
  counting as picked for the diversity criterion.

Losses: :func:`student_losses` runs the student model over each sample and averages the loss
over its trained (assistant) tokens; :func:`unigram_losses` is the no-model proxy, the mean
surprisal of the assistant tokens under a unigram model of the pool (rare content scores high).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import sparse

from agentune.tasks.build_dataset.samples import Sample, dedup_text
from agentune.tasks.common.chat_audit import ChatAuditor
from agentune.tasks.common.near_dedup import mixed_ngram_hashes

Strategy = Literal["random", "diversity", "loss_topk", "hybrid"]
STRATEGIES: tuple[Strategy, ...] = ("random", "diversity", "loss_topk", "hybrid")
NEEDS_LOSS = frozenset({"loss_topk", "hybrid"})
_FEATURE_BITS = 20


def text_vectors(texts: Sequence[str]) -> sparse.csr_matrix:
    """L2-normalised binary vectors of hashed word bigrams (Latin) and character bigrams (CJK)."""
    rows, cols = [], []
    for r, text in enumerate(texts):
        hashes = np.unique(mixed_ngram_hashes(text, 2, 2) & np.uint32((1 << _FEATURE_BITS) - 1))
        rows.append(np.full(hashes.size, r))
        cols.append(hashes.astype(np.int64))
    row_idx = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    col_idx = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    m = sparse.csr_matrix((np.ones(row_idx.size), (row_idx, col_idx)),
                          shape=(len(texts), 1 << _FEATURE_BITS))
    norms = np.sqrt(np.asarray(m.sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sparse.diags(1.0 / norms) @ m


def _loss_turns(loss_share: float) -> Iterator[bool]:
    """True where the k-th pick is a loss pick: spread evenly, ``loss_share`` of all picks."""
    k = 0
    while True:
        k += 1
        yield math.floor(k * loss_share + 1e-9) > math.floor((k - 1) * loss_share + 1e-9)


def selection_order(
    pool: Sequence[Sample], strategy: Strategy, *, seed: str,
    losses: Mapping[str, float] | None = None, loss_share: float = 0.5,
) -> Iterator[Sample]:
    """The pool in ``strategy``'s pick order (lazy: diversity work is done per pick)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    pool = sorted(pool, key=lambda s: s.id)  # the order must not depend on the input order
    if not pool:
        return
    by_loss: list[int] = []
    if strategy in NEEDS_LOSS:
        if losses is None:
            raise ValueError(f"strategy {strategy!r} needs per-row losses")
        # A sample without a loss (nothing to train on) goes last.
        by_loss = sorted(range(len(pool)), key=lambda i: (-losses.get(pool[i].id, -math.inf),
                                                          pool[i].id))
    rng = random.Random(seed)
    if strategy == "random":
        order = list(pool)
        rng.shuffle(order)
        yield from order
        return
    if strategy == "loss_topk":
        yield from (pool[i] for i in by_loss)
        return

    vectors = text_vectors([dedup_text(s) for s in pool])
    closest = np.full(len(pool), -np.inf)  # similarity to the nearest pick so far
    taken = np.zeros(len(pool), dtype=bool)
    turns = _loss_turns(loss_share if strategy == "hybrid" else 0.0)
    loss_cursor = 0
    for n in range(len(pool)):
        if next(turns):
            while taken[by_loss[loss_cursor]]:
                loss_cursor += 1
            pick = by_loss[loss_cursor]
        elif n == 0:
            pick = rng.randrange(len(pool))
        else:
            pick = int(np.argmin(np.where(taken, np.inf, closest)))
        taken[pick] = True
        yield pool[pick]
        sims = (vectors @ vectors[pick].T).toarray().ravel()
        np.maximum(closest, sims, out=closest)


def unigram_losses(pool: Sequence[Sample], auditor: ChatAuditor) -> dict[str, float]:
    """Mean surprisal (nats) of each sample's trained tokens under an add-one unigram model of
    all trained tokens in the pool. Samples with no trained token get no loss."""
    encoded = {}
    for sample in pool:
        ids, mask = auditor.encode(sample.messages, sample.tools)
        encoded[sample.id] = [t for t, m in zip(ids[: auditor.max_length],
                                                mask[: auditor.max_length], strict=True) if m]
    counts = Counter(t for tokens in encoded.values() for t in tokens)
    total, vocab = sum(counts.values()), len(auditor.tokenizer)
    return {
        sid: float(np.mean([-math.log((counts[t] + 1) / (total + vocab)) for t in tokens]))
        for sid, tokens in encoded.items() if tokens
    }


def student_losses(
    pool: Sequence[Sample], auditor: ChatAuditor, model_path: str | Path, *,
    batch_size: int = 8, device: str | None = None,
) -> dict[str, float]:
    """Mean cross-entropy (nats) of each sample's trained tokens under the student model, on the
    sample truncated to max_length as in training. Samples with no trained token get no loss."""
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_path))
    model = model.to(device).eval()
    pad = auditor.tokenizer.pad_token_id if auditor.tokenizer.pad_token_id is not None else 0
    encoded = []
    for sample in pool:
        ids, mask = auditor.encode(sample.messages, sample.tools)
        ids, mask = ids[: auditor.max_length], mask[: auditor.max_length]
        if any(mask[1:]):  # the first token is never predicted
            encoded.append((sample.id, ids, mask))
    encoded.sort(key=lambda e: len(e[1]))  # similar lengths together: less padding
    losses: dict[str, float] = {}
    with torch.no_grad():
        for start in range(0, len(encoded), batch_size):
            batch = encoded[start : start + batch_size]
            width = max(len(ids) for _, ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for r, (_, ids, mask) in enumerate(batch):
                input_ids[r, : len(ids)] = torch.tensor(ids)
                attention[r, : len(ids)] = 1
                trained = torch.tensor(mask) == 1
                labels[r, : len(ids)] = torch.where(trained, torch.tensor(ids), -100)
            logits = model(input_ids=input_ids.to(device),
                           attention_mask=attention.to(device)).logits.float()
            shift_logits, shift_labels = logits[:, :-1], labels[:, 1:].to(device)
            token_loss = torch.nn.functional.cross_entropy(
                shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                ignore_index=-100, reduction="none",
            ).view(shift_labels.shape)
            counted = (shift_labels != -100).sum(dim=1)
            for r, (sid, _, _) in enumerate(batch):
                losses[sid] = float(token_loss[r].sum() / counted[r])
    return losses


LossFunction = Callable[[Sequence[Sample]], dict[str, float]]
