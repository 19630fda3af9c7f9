"""Mixing general SFT data into the agent data (MAT: Agent 5 : general 1), stratified.

A pool is ordered stratum by stratum (each with its coreset strategy, ``coreset.selection_order``)
and the strata are interleaved in proportion to their sizes, so any prefix of the result holds
every stratum in proportion, within one sample. Agent strata are task type x template source,
general strata source file x language (``Sample.stratum``).

The general share is then a prefix of that order:

- by samples: ``round(n_agent / ratio)`` general rows, exact;
- by tokens: rows until their tokens reach ``agent_tokens / ratio``; the row that crosses the
  target is kept only if that lands closer to it, so the result is within one sample of exact.
  Tokens are those the trainer sees: the rendered sample, truncated to max_length.

A row can still be refused while it is taken (``admit``: the lazy audit of general rows, which
drops rows with no trainable token); the next one in order takes its place.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentune.tasks.build_dataset.coreset import Strategy, selection_order
from agentune.tasks.build_dataset.samples import Sample

MixBy = Literal["samples", "tokens"]


def interleave_strata(orders: Mapping[tuple[str, ...], Iterator[Sample]],
                      sizes: Mapping[tuple[str, ...], int]) -> Iterator[Sample]:
    """Pull from the stratum furthest behind its share: the smallest (taken + 0.5) / size."""
    heap = [(0.5 / sizes[s], s) for s in sorted(orders) if sizes[s] > 0]
    heapq.heapify(heap)
    taken: dict[tuple[str, ...], int] = defaultdict(int)
    while heap:
        _, stratum = heapq.heappop(heap)
        item = next(orders[stratum], None)
        if item is None:
            continue
        yield item
        taken[stratum] += 1
        heapq.heappush(heap, ((taken[stratum] + 0.5) / sizes[stratum], stratum))


def stratified_order(pool: Sequence[Sample], strategy: Strategy, *, seed: str,
                     losses: Mapping[str, float] | None = None,
                     loss_share: float = 0.5) -> Iterator[Sample]:
    """``pool`` in pick order: each stratum ordered by ``strategy``, strata interleaved."""
    strata: dict[tuple[str, ...], list[Sample]] = defaultdict(list)
    for sample in pool:
        strata[sample.stratum].append(sample)
    orders = {
        key: selection_order(members, strategy, seed=f"{seed}:{'/'.join(key)}", losses=losses,
                             loss_share=loss_share)
        for key, members in strata.items()
    }
    return interleave_strata(orders, {k: len(v) for k, v in strata.items()})


def take_count(order: Iterable[Sample], count: int,
               admit: Callable[[Sample], bool] = lambda s: True) -> list[Sample]:
    taken: list[Sample] = []
    if count <= 0:
        return taken
    for sample in order:
        if admit(sample):
            taken.append(sample)
            if len(taken) == count:
                break
    return taken


def take_tokens(order: Iterable[Sample], target: float, tokens: Callable[[Sample], int],
                admit: Callable[[Sample], bool] = lambda s: True) -> tuple[list[Sample], bool]:
    """Samples until their tokens reach ``target`` (within one sample), and whether it was
    reached (False: the order ran out first)."""
    taken: list[Sample] = []
    total = 0
    if target <= 0:
        return taken, True
    for sample in order:
        if not admit(sample):
            continue
        n = tokens(sample)
        if total + n <= target:
            taken.append(sample)
            total += n
            if total == target:
                return taken, True
            continue
        if total + n - target < target - total:  # crossing the target lands closer to it
            taken.append(sample)
        return taken, True
    return taken, False


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


@dataclass
class Mix:
    agent: list[Sample]
    general: list[Sample]
    stats: dict[str, Any] = field(default_factory=dict)


def mix_general(agent: Sequence[Sample], general_order: Iterable[Sample], *, ratio: float,
                by: MixBy, tokens: Callable[[Sample], int],
                admit: Callable[[Sample], bool] = lambda s: True,
                examples: Callable[[Sample], int] = lambda s: 1) -> Mix:
    """The agent rows plus the general rows that bring agent : general to ``ratio`` : 1.
    ``examples`` is how many training examples a row becomes (steps form: one per step), so
    the ratio by samples holds in the form trained; a general row is one example."""
    agent_tokens = sum(tokens(s) for s in agent)
    agent_examples = sum(examples(s) for s in agent)
    if by == "samples":
        target: float = round_half_up(agent_examples / ratio)
        general = take_count(general_order, int(target), admit)
    else:
        target = agent_tokens / ratio
        general, reached = take_tokens(general_order, target, tokens, admit)
    general_tokens = sum(tokens(s) for s in general)
    stats = {
        "by": by,
        "target_ratio": ratio,
        "agent_rows": len(agent),
        "agent_examples": agent_examples,
        "general_rows": len(general),
        "agent_tokens": agent_tokens,
        "general_tokens": general_tokens,
        "general_target": round(target, 1),
        "ratio_by_samples": round(agent_examples / len(general), 4) if general else None,
        "ratio_by_tokens": round(agent_tokens / general_tokens, 4) if general_tokens else None,
        # The pool ran out before the target: fewer general rows than the ratio asks for.
        "general_short": len(general) < target if by == "samples" else not reached,
    }
    return Mix(list(agent), general, stats)
