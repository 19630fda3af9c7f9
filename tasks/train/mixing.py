"""What a run trains on besides its dataset's train split as it comes: task weights and replay.

**Task weights** resample the train rows so each listed task kind has exactly its share of the
listed kinds' rows (their total kept: shares by the largest-remainder rule, so the counts sum
up); a kind with fewer rows than its share is drawn with repetition, one with more without.
Kinds not listed pass through unchanged. A listed kind with a positive weight and no row is an
error (the mix could not be what was asked).

**Replay** (seed 004's online continual learning) mixes rows of earlier training-data versions
into the run: a rehearsal buffer of at most ``buffer_size`` rows sampled from those versions
(the most recent version first, seeded), of which ``round(new * ratio / (1 - ratio))`` are drawn
so that replayed rows are ``ratio`` of the mix (cycling through the buffer, each pass in a new
seeded order, when it holds fewer). Both are reported in the run card.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class MixError(ValueError):
    """A mix that cannot be made as configured; the message says why."""


def shares(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` split by ``weights`` into integers that sum to it (largest remainders)."""
    norm = sum(weights.values())
    exact = {k: total * w / norm for k, w in weights.items()}
    counts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(counts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def _draw(rows: Sequence[Any], n: int, rng: random.Random) -> list[Any]:
    """``n`` of ``rows``: without repetition when there are enough, else whole shuffled passes
    and a partial last one."""
    out: list[Any] = []
    while len(out) < n:
        take = min(n - len(out), len(rows))
        out += rng.sample(list(rows), take)
    return out


@dataclass
class TaskWeighting:
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {"weights": self.weights, "rows before": self.before, "rows after": self.after}


def apply_task_weights(rows: Sequence[Mapping[str, Any]], weights: Mapping[str, float] | None,
                       *, key: str, seed: int, where: str
                       ) -> tuple[list[Mapping[str, Any]], TaskWeighting | None]:
    """The rows resampled by ``weights`` over the task kind in column ``key``."""
    if not weights:
        return list(rows), None
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(str(row.get(key)), []).append(row)
    active = {k: float(w) for k, w in weights.items() if w > 0}
    empty = sorted(k for k in active if not by_kind.get(k))
    if empty:
        raise MixError(f"train.task_weights: {where} has no train row of kind {empty} (column "
                       f"{key!r}; kinds present: {sorted(by_kind)})")
    listed = [r for k in active for r in by_kind[k]]
    counts = shares(len(listed), active)
    rng = random.Random(f"{seed}:task-weights")
    out: list[Mapping[str, Any]] = [r for r in rows if str(r.get(key)) not in weights]
    for kind in sorted(active):
        out += _draw(by_kind[kind], counts[kind], rng)
    rng.shuffle(out)
    report = TaskWeighting(
        before=dict(sorted(Counter(str(r.get(key)) for r in rows).items())),
        after=dict(sorted(Counter(str(r.get(key)) for r in out).items())),
        weights=dict(weights))
    return out, report


@dataclass
class Replay:
    sources: list[str]
    buffer: int
    replayed: int
    new: int

    def report(self) -> dict[str, Any]:
        total = self.new + self.replayed
        return {"earlier versions": self.sources, "buffer rows": self.buffer,
                "new rows": self.new, "replayed rows": self.replayed,
                "replayed share": round(self.replayed / total, 6) if total else 0.0}


def replay_buffer(earlier: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], buffer_size: int,
                  seed: int) -> list[Mapping[str, Any]]:
    """The rehearsal buffer: up to ``buffer_size`` rows of the earlier versions, the most recent
    (first) version's rows first, each version's in a seeded order."""
    rng = random.Random(f"{seed}:replay-buffer")
    buffer: list[Mapping[str, Any]] = []
    for _, rows in earlier:
        if len(buffer) >= buffer_size:
            break
        picked = list(rows)
        rng.shuffle(picked)
        buffer += picked[:buffer_size - len(buffer)]
    return buffer


def mix_replay(new: Sequence[Mapping[str, Any]],
               earlier: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], *, buffer_size: int,
               ratio: float, seed: int) -> tuple[list[Mapping[str, Any]], Replay]:
    """The new rows and the replayed rows, shuffled together (seeded)."""
    buffer = replay_buffer(earlier, buffer_size, seed)
    wanted = round(len(new) * ratio / (1 - ratio))
    rng = random.Random(f"{seed}:replay")
    replayed = _draw(buffer, wanted, rng) if buffer else []
    mixed = list(new) + replayed
    rng.shuffle(mixed)
    return mixed, Replay([name for name, _ in earlier], len(buffer), len(replayed), len(new))
