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
from agentune.tasks.common.near_dedup import mixed_ngram_hash_sets
from agentune.tasks.llm.model_folders import load_causal_lm

Strategy = Literal["random", "diversity", "loss_topk", "hybrid"]
STRATEGIES: tuple[Strategy, ...] = ("random", "diversity", "loss_topk", "hybrid")
NEEDS_LOSS = frozenset({"loss_topk", "hybrid"})
_FEATURE_BITS = 20


def text_vectors(texts: Sequence[str]) -> sparse.csr_matrix:
    """L2-normalised binary vectors of hashed word bigrams (Latin) and character bigrams (CJK)."""
    rows, cols = [], []
    for r, text_hashes in enumerate(mixed_ngram_hash_sets(texts, 2, 2)):
        hashes = np.unique(text_hashes & np.uint32((1 << _FEATURE_BITS) - 1))
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


Encoded = tuple[str, Sequence[int], Sequence[int]]
"""``(sample id, token ids, trained-token mask)`` of one sequence."""

MAX_BATCH_TOKENS = 8192
"""Tokens (rows x padded width) per forward pass: bounds the activations."""
LOGITS_BUDGET_BYTES = 256 << 20
"""Bytes of fp32 logits alive at once: trained tokens go through the output layer this many
(divided by the vocabulary size) at a time."""


def student_losses(
    pool: Sequence[Sample], auditor: ChatAuditor, model_path: str | Path, *,
    max_batch_tokens: int = MAX_BATCH_TOKENS, logits_budget_bytes: int = LOGITS_BUDGET_BYTES,
    device: str | None = None,
) -> dict[str, float]:
    """Mean cross-entropy (nats) of each sample's trained tokens under the student model, on the
    sample truncated to max_length as in training. Samples with no trained token get no loss.
    Memory is bounded whatever the pool's lengths and the vocabulary (see
    :func:`sequence_losses`)."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model: Any = load_causal_lm(Path(model_path))  # weights, or a LoRA adapter merged
    model = model.to(device).eval()
    pad = auditor.tokenizer.pad_token_id if auditor.tokenizer.pad_token_id is not None else 0
    encoded = []
    for sample in pool:
        ids, mask = auditor.encode(sample.messages, sample.tools)
        encoded.append((sample.id, ids[: auditor.max_length], mask[: auditor.max_length]))
    return sequence_losses(model, encoded, pad_id=pad, max_batch_tokens=max_batch_tokens,
                           logits_budget_bytes=logits_budget_bytes)


def sequence_losses(
    model: Any, encoded: Sequence[Encoded], *, pad_id: int = 0,
    max_batch_tokens: int = MAX_BATCH_TOKENS, logits_budget_bytes: int = LOGITS_BUDGET_BYTES,
) -> dict[str, float]:
    """Mean cross-entropy (nats) of each sequence's trained tokens (those whose mask is 1, the
    first token excepted: it is never predicted) under a causal LM; sequences with none get no
    loss.

    Memory does not grow with the pool or the vocabulary the way a batch of full logits does
    (8 rows x 4,096 tokens x Qwen's 152k vocabulary in fp32 is ~20 GB): rows go through the
    decoder in batches of at most ``max_batch_tokens`` tokens (one longer row alone), only the
    hidden states of trained positions are kept, and those go through the output layer a chunk
    at a time, each chunk's fp32 logits (at most ``logits_budget_bytes``) reduced to
    log-sum-exp minus the target's logit before the next. The numbers equal the model's own
    loss on the same labels."""
    import torch

    head = model.get_output_embeddings()
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    vocab = int(head.weight.shape[0])
    softcap = getattr(model.config, "final_logit_softcapping", None)
    scale = getattr(model.config, "logit_scale", None)
    device = next(model.parameters()).device
    chunk = max(1, logits_budget_bytes // (4 * vocab))
    usable = sorted((e for e in encoded if any(e[2][1:])), key=lambda e: len(e[1]))
    totals: dict[str, float] = {}
    with torch.no_grad():
        start = 0
        while start < len(usable):
            # Sorted by length: the batch's last row is its widest.
            end = start + 1
            while end < len(usable) and (end + 1 - start) * len(usable[end][1]) <= max_batch_tokens:
                end += 1
            batch = usable[start:end]
            start = end
            width = len(batch[-1][1])
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            # Position p predicts token p + 1: the positions whose next token is trained.
            rows, cols, targets = [], [], []
            for r, (_, ids, mask) in enumerate(batch):
                input_ids[r, : len(ids)] = torch.tensor(ids)
                attention[r, : len(ids)] = 1
                for p in range(len(ids) - 1):
                    if mask[p + 1]:
                        rows.append(r)
                        cols.append(p)
                        targets.append(ids[p + 1])
            hidden = decoder(input_ids=input_ids.to(device),
                             attention_mask=attention.to(device)).last_hidden_state
            picked = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]
            del hidden
            target = torch.tensor(targets, device=device)
            token_loss = torch.empty(len(targets), dtype=torch.float32, device=device)
            for at in range(0, len(targets), chunk):
                logits = head(picked[at : at + chunk]).float()
                if scale is not None:
                    logits = logits * scale
                if softcap is not None:
                    logits = torch.tanh(logits / softcap) * softcap
                token_loss[at : at + chunk] = (
                    torch.logsumexp(logits, dim=-1)
                    - logits.gather(1, target[at : at + chunk, None]).squeeze(1))
                del logits
            per_row = torch.zeros(len(batch), dtype=torch.float64, device=device)
            per_row.index_add_(0, torch.tensor(rows, device=device), token_loss.double())
            counted = Counter(rows)
            for r, (sid, _, _) in enumerate(batch):
                totals[sid] = float(per_row[r]) / counted[r]
    return totals


LossFunction = Callable[[Sequence[Sample]], dict[str, float]]
