"""Exact and near dedup of training samples, one representative kept per cluster.

Samples are taken in representative order (best judge score, then the shortest, then the id:
:func:`samples.dedup_keys`), so the first of every group is the one kept:

1. exact: sha256 of the normalised serialisation (Unicode, whitespace, key order and tool-call
   ids normalised), messages and tools together;
2. near: MinHash LSH (``near_dedup.NearDupIndex``) over user and assistant content, word n-grams
   for Latin text and character n-grams for Chinese, candidates verified by exact Jaccard. A
   sample joins the most similar representative kept before it, so any two kept samples are
   less similar than the threshold.

Every kept sample gets a cluster id; every dropped one a reject naming its representative and
cluster. Signatures are computed in batches while the exact pass runs (on other processes when
``map_batches`` maps there), and the index can live in Redis.
"""

from __future__ import annotations

import contextvars
import gc
import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agentune.config.build_dataset import BuildDatasetConfig
from agentune.tasks.build_dataset.samples import Sample, dedup_keys, dedup_text
from agentune.tasks.common.near_dedup import Match, NearDupIndex
from agentune.tasks.common.rejects import Reject

if TYPE_CHECKING:
    from agentune.tasks.orchestration.chunk_map import ChunkMap


SIGNING_BATCH = 2048
"""Samples signed (MinHash) per batch, and looked up in the index per batch."""


@dataclass
class DedupOutcome:
    kept: list[Sample]
    """The representatives, in input order, each with its ``cluster_id`` set."""
    rejects: list[Reject] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def cluster_id(representative_id: str) -> str:
    return "c-" + hashlib.sha256(representative_id.encode("utf-8")).hexdigest()[:12]


def _signing(index: NearDupIndex, samples: Sequence[Sample], batch_size: int,
             map_batches: ChunkMap) -> Callable[[], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Start signing every sample's dedup text on a thread of this process (in the caller's
    context), through ``map_batches``; the returned function waits for the signatures by id.
    With a map over other processes (or Dask) the signatures are computed while this process
    works out the exact keys; with the builtin map the two share the interpreter."""
    signatures: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    failure: list[BaseException] = []

    def sign() -> None:
        try:
            for batch in index.sign(((s.id, dedup_text(s)) for s in samples),
                                    batch_size=batch_size, map_batches=map_batches):
                for key, hashes, values in batch:
                    signatures[key] = (hashes, values)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(sign,),
                              name="dedup-signatures", daemon=True)
    thread.start()

    def wait() -> dict[str, tuple[np.ndarray, np.ndarray]]:
        thread.join()
        if failure:
            raise failure[0]
        return signatures

    return wait


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """The objects alive now (the samples: millions of dicts) left out of garbage collection
    while dedup allocates: each full collection would walk all of them (~8% of dedup's time at
    100k rows). Undone afterwards unless someone had frozen the heap before."""
    already = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not already:
            gc.unfreeze()


def deduplicate_samples(
    samples: Sequence[Sample], cfg: BuildDatasetConfig, *, stage: str,
    storage_config: Mapping[str, Any] | None = None, batch_size: int = SIGNING_BATCH,
    map_batches: ChunkMap = map,
) -> DedupOutcome:
    """Dedup under ``cfg``'s ``near_dup_*`` settings; ``storage_config``: datasketch's storage
    config for the index (``{"type": "redis", ...}`` keeps it in Redis; None: in memory)."""
    with _heap_frozen():
        return _deduplicate(samples, cfg, stage, storage_config, batch_size, map_batches)


def _deduplicate(samples: Sequence[Sample], cfg: BuildDatasetConfig, stage: str,
                 storage_config: Mapping[str, Any] | None, batch_size: int,
                 map_batches: ChunkMap) -> DedupOutcome:
    index = NearDupIndex(
        cfg.near_dup_threshold, num_perm=cfg.near_dup_num_perm, ngram=cfg.near_dup_char_ngram,
        word_ngram=cfg.near_dup_word_ngram, min_recall=cfg.near_dup_min_recall, verify="exact",
        storage_config=storage_config,
    )
    # Signatures for every sample (exact duplicates too: a few percent of wasted work buys
    # signing them beside the exact pass instead of after it).
    signatures = _signing(index, samples, batch_size, map_batches)
    keyed = sorted(((dedup_keys(s), s) for s in samples), key=lambda k: k[0][0])
    ordered = [sample for _, sample in keyed]
    keeper_of_key: dict[str, str] = {}
    exact_of: dict[str, str] = {}
    unique: list[Sample] = []
    for (_, key), sample in keyed:
        if key in keeper_of_key:
            exact_of[sample.id] = keeper_of_key[key]
        else:
            keeper_of_key[key] = sample.id
            unique.append(sample)

    indexed_before = len(index)
    signed = signatures()
    near_of: dict[str, Match] = {}
    for key, match in index.deduplicate_signed(((s.id, *signed[s.id]) for s in unique),
                                               batch_size=batch_size):
        if match is not None:
            near_of[key] = match

    def representative(sample_id: str) -> str:
        sample_id = exact_of.get(sample_id, sample_id)
        return near_of[sample_id].key if sample_id in near_of else sample_id

    in_input = {s.id for s in samples}
    rejects = []
    for sample in ordered:
        rep = representative(sample.id)
        where = f"cluster {cluster_id(rep)}" + ("" if rep in in_input else ", indexed earlier")
        if sample.id in exact_of:
            rejects.append(Reject(stage, "exact_duplicate", sample.id,
                                  f"same as {exact_of[sample.id]} ({where})"))
        elif sample.id in near_of:
            match = near_of[sample.id]
            rejects.append(Reject(stage, "near_duplicate", sample.id,
                                  f"jaccard {match.similarity:.3f} with {match.key} ({where})"))
    kept = [s for s in samples if s.id not in exact_of and s.id not in near_of]
    for sample in kept:
        sample.cluster_id = cluster_id(sample.id)
    sizes = Counter(representative(s.id) for s in samples)
    return DedupOutcome(kept, rejects, {
        "input": len(samples),
        "exact_duplicates": len(exact_of),
        "near_duplicates": len(near_of),
        "kept": len(kept),
        "clusters_with_duplicates": sum(1 for n in sizes.values() if n > 1),
        "largest_cluster": max(sizes.values(), default=0),
        "threshold": cfg.near_dup_threshold,
        "word_ngram": cfg.near_dup_word_ngram,
        "char_ngram": cfg.near_dup_char_ngram,
        "num_perm": cfg.near_dup_num_perm,
        "lsh_bands": index.params[0],
        "lsh_rows": index.params[1],
        "index": "redis" if storage_config else "memory",
        "indexed_before": indexed_before,
    })
