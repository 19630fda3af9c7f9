"""Preference pairs from scored trajectories of the same scenario.

Two trajectories of one scenario (from one source) make a pair when they share the conversation
up to one decision and differ there: the first message at which they differ is an assistant
message in both (a call, a question or an answer, taken in the same context). The prompt is the
shared part (with the tools offered), ``chosen`` the decision of the trajectory the reward ranks
higher, ``rejected`` the other's; the pair's margin is the difference of the two rewards, at
least ``min_margin``. Comparing messages ignores call ids (two attempts number their calls
alike or not); a tool result or user reply that differs is not a decision, so such trajectories
make no pair. Every comparison that makes no pair is counted by its reason.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

# Upper edges of the margin histogram in the run summary (the last bin is open).
MARGIN_EDGES = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
SKIP_REASONS = ("below_margin", "no_decision_point", "differ_at_observation", "duplicate",
                "over_cap")


@dataclass(frozen=True)
class Candidate:
    """One scored trajectory: an attempt of synthesis or a rollout of the student."""

    id: str
    source: str
    scenario_id: str
    kind: str
    lang: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reward: float
    components: dict[str, float]
    """The verifier's components and each reward term's value."""


@dataclass
class PairBuild:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    candidates: Counter[str] = field(default_factory=Counter)
    """Trajectories considered, by source."""
    decisions: Counter[str] = field(default_factory=Counter)
    """Decision pairs by what they teach, and the rows that gave none by why
    (``decisions.py``)."""

    def stats(self) -> dict[str, Any]:
        by_source = Counter(r["source"] for r in self.rows)
        by_kind = Counter(r["kind"] for r in self.rows)
        by_split = Counter(r["split"] for r in self.rows)
        return {
            "pairs": len(self.rows),
            "candidates": dict(self.candidates),
            "by_source": dict(sorted(by_source.items())),
            "by_kind": dict(sorted(by_kind.items())),
            "by_split": dict(sorted(by_split.items())),
            "skipped": {reason: self.skipped.get(reason, 0) for reason in SKIP_REASONS},
            "margin_histogram": margin_histogram([r["margin"] for r in self.rows]),
            "scenarios": len({r["scenario_id"] for r in self.rows}),
            "decisions": dict(sorted(self.decisions.items())),
        }


def margin_histogram(margins: Sequence[float]) -> list[dict[str, Any]]:
    """Pairs per margin bin: ``[lo, hi)`` over :data:`MARGIN_EDGES`, the last open."""
    edges = (0.0, *MARGIN_EDGES, math.inf)
    counts = [0] * (len(edges) - 1)
    for m in margins:
        for i in range(len(counts)):
            if edges[i] <= m < edges[i + 1]:
                counts[i] += 1
                break
    return [{"margin": f"[{lo:g}, {hi:g})" if hi != math.inf else f">= {lo:g}", "pairs": n}
            for lo, hi, n in zip(edges, edges[1:], counts, strict=False)]


def _canonical(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return value
    return value


def message_key(message: Mapping[str, Any]) -> str:
    """A message as compared: role, text and calls (name and arguments), ids left out."""
    calls = [(c.get("function", c).get("name"), _canonical(c.get("function", c).get("arguments")))
             for c in message.get("tool_calls") or []]
    return json.dumps([message.get("role"), (message.get("content") or "").strip(), calls],
                      ensure_ascii=False, sort_keys=True, default=str)


def pair_key(pair: Mapping[str, Any]) -> str:
    """What makes two pairs the same: prompt, chosen and rejected as compared (ids left out)."""
    return "\n".join(message_key(m) for m in [*pair["prompt"], *pair["chosen"],
                                              *pair["rejected"]])


def decision_point(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
                   ) -> tuple[int | None, str | None]:
    """The index of the first message the two conversations differ at, when it is an assistant
    message in both; else (None, why not)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if message_key(x) == message_key(y):
            continue
        if x.get("role") == "assistant" and y.get("role") == "assistant":
            return i, None
        return None, "differ_at_observation"
    return None, "no_decision_point"


def decision(message: Mapping[str, Any]) -> dict[str, Any]:
    """The decision as a training message: role, text and calls (arguments as objects)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function", call)
        arguments = _canonical(fn.get("arguments"))
        calls.append({"id": call.get("id") or f"call_{i}", "type": "function",
                      "function": {"name": fn.get("name"),
                                   "arguments": arguments if isinstance(arguments, dict) else {}}})
    if calls:
        out["tool_calls"] = calls
    return out


def training_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A prompt message as trained on: assistant calls with object arguments, the rest as is
    (a tool result keeps its call id and name)."""
    if message.get("role") == "assistant":
        return decision(message)
    return {k: v for k, v in message.items() if v is not None}


def split_of(scenario_id: str, val_ratio: float, seed: int) -> str:
    """The split of a scenario's pairs (seeded: a scenario's pairs stay together)."""
    if val_ratio <= 0:
        return "train"
    digest = hashlib.sha256(f"{seed}:preferences:{scenario_id}".encode()).digest()
    return "val" if int.from_bytes(digest[:8], "big") / 2**64 < val_ratio else "train"


def build_pairs(candidates: Iterable[Candidate], *, min_margin: float,
                max_pairs_per_scenario: int, val_ratio: float, seed: int) -> PairBuild:
    """Every pair of the candidates, grouped by (scenario, source)."""
    out = PairBuild()
    groups: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for c in candidates:
        out.candidates[c.source] += 1
        groups[(c.scenario_id, c.source)].append(c)
    for (scenario_id, source), members in sorted(groups.items()):
        members.sort(key=lambda c: c.id)
        found: list[dict[str, Any]] = []
        seen: set[str] = set()
        for a, b in combinations(members, 2):
            at, why = decision_point(a.messages, b.messages)
            if at is None:
                out.skipped[why or "no_decision_point"] += 1
                continue
            margin = abs(a.reward - b.reward)
            if margin < min_margin - 1e-9 or margin == 0:  # rewards are rounded to 1e-6
                out.skipped["below_margin"] += 1
                continue
            chosen, rejected = (a, b) if a.reward > b.reward else (b, a)
            key = json.dumps([[message_key(m) for m in chosen.messages[:at]],
                              message_key(chosen.messages[at]),
                              message_key(rejected.messages[at])], ensure_ascii=False)
            if key in seen:
                out.skipped["duplicate"] += 1
                continue
            seen.add(key)
            found.append(pair_row(chosen, rejected, at, margin, source, scenario_id,
                              split_of(scenario_id, val_ratio, seed)))
        found.sort(key=lambda r: (-r["margin"], r["id"]))
        out.skipped["over_cap"] += max(0, len(found) - max_pairs_per_scenario)
        out.rows += found[:max_pairs_per_scenario]
    out.rows.sort(key=lambda r: (r["scenario_id"], r["source"], r["id"]))
    return out


def pair_row(chosen: Candidate, rejected: Candidate, at: int, margin: float, source: str,
         scenario_id: str, split: str) -> dict[str, Any]:
    """The ``preferences`` row (``schemas.PREFERENCE_FEATURES``) of two trajectories that
    differ first at message ``at``."""
    pair_id = hashlib.sha256(f"{chosen.id}|{rejected.id}|{at}".encode()).hexdigest()[:16]
    return {
        "id": pair_id, "split": split, "source": source, "scenario_id": scenario_id,
        "kind": chosen.kind, "lang": chosen.lang, "decision": at,
        "prompt": [training_message(m) for m in chosen.messages[:at]],
        "tools": [dict(t) for t in chosen.tools],
        "chosen": [decision(chosen.messages[at])],
        "rejected": [decision(rejected.messages[at])],
        "chosen_id": chosen.id, "rejected_id": rejected.id,
        "chosen_reward": chosen.reward, "rejected_reward": rejected.reward,
        "margin": round(margin, 6),
        "chosen_components": dict(chosen.components),
        "rejected_components": dict(rejected.components),
    }
