"""Training pairs for the tool encoder, from the data agentune already has.

A case is a request and the tools it needs: a scenario whose ground truth calls tools (every
distinct tool called), or a verified trajectory (its query and the tools its assistant turns
called). A pair is (request, a needed tool, a hard negative): the best BM25 hit for the request
that the request does not need; when BM25 finds nothing usable, a seeded random tool. Chinese
requests also pair with the English-only view of the tools (cross-language pairs).

Only ``train`` scenarios give pairs; a trajectory of a held-out or reserved scenario, or one whose
query is a held-out request, gives none, so evaluation requests are never trained on.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentune.tasks.environments.scenarios import CALLING_KINDS, ScenarioRecord
from agentune.tasks.tool_retrieval.documents import CatalogView, catalog_view, tool_text
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.selection import ToolRetriever


@dataclass(frozen=True)
class RetrievalCase:
    id: str
    request: str
    lang: str
    tools: tuple[str, ...]
    """The tools it needs, in the order first called."""
    split: str
    source: str
    """``scenario`` or ``trajectory``."""


@dataclass(frozen=True)
class TrainingPair:
    anchor: str
    positive: str
    negative: str
    tool: str
    negative_tool: str
    case_id: str
    view: str
    """The catalog view the tool texts come from: ``both``, or ``en`` (cross-language)."""

    def row(self) -> dict[str, Any]:
        return asdict(self)


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def scenario_cases(records: Iterable[ScenarioRecord]) -> list[RetrievalCase]:
    """A case per scenario whose ground truth calls tools."""
    out = []
    for r in records:
        s = r.scenario
        names = tuple(dict.fromkeys(c.name for c in s.calls()))
        if s.kind in CALLING_KINDS and names:
            out.append(RetrievalCase(s.id, s.request, s.lang, names, r.split, "scenario"))
    return out


def _called(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    names = []
    for m in messages:
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                if name:
                    names.append(str(name))
    return names


def trajectory_cases(rows: Iterable[Mapping[str, Any]], known_tools: Iterable[str]
                     ) -> list[RetrievalCase]:
    """A case per verified trajectory (or, for a plain query, an accepted one) that called a
    catalog tool; ``ask_user`` and other non-catalog names are left out."""
    known = set(known_tools)
    out = []
    for row in rows:
        verified = row.get("verified")  # None (or NaN from pandas): a plain query, accepted
        if verified is not None and verified == verified and not bool(verified):
            continue
        names = tuple(n for n in dict.fromkeys(_called(row.get("messages") or [])) if n in known)
        query = str(row.get("query") or "")
        if names and query:
            out.append(RetrievalCase(str(row.get("id")), query, str(row.get("lang") or "en"),
                                     names, "train", "trajectory"))
    return out


def training_cases(scenarios: Sequence[RetrievalCase], trajectories: Sequence[RetrievalCase],
                   *, trajectory_scenarios: Mapping[str, str | None] | None = None
                   ) -> tuple[list[RetrievalCase], list[dict[str, str]]]:
    """The cases pairs may come from, and a reject per case left out for leakage: the ``train``
    scenarios, and the trajectories whose query is no evaluation request and whose scenario
    (``trajectory_scenarios``: trajectory id -> scenario id) is no evaluation scenario."""
    held = [c for c in scenarios if c.split != "train"]
    held_requests = {normalise(c.request) for c in held}
    held_ids = {c.id for c in held}
    links = trajectory_scenarios or {}
    kept = [c for c in scenarios if c.split == "train"]
    rejects = []
    for c in trajectories:
        if links.get(c.id) in held_ids or normalise(c.request) in held_requests:
            rejects.append({"id": c.id, "reason": "heldout_leak",
                            "detail": "a trajectory of an evaluation scenario or request"})
        else:
            kept.append(c)
    return kept, rejects


def _negatives(case: RetrievalCase, hits: Sequence[tuple[str, float]], names: Sequence[str],
               count: int, rng: random.Random) -> list[str]:
    needed = set(case.tools)
    hard = [n for n, _ in hits if n not in needed][:count]
    pool = [n for n in names if n not in needed and n not in hard]
    return hard + rng.sample(pool, min(count - len(hard), len(pool)))


def training_pairs(cases: Sequence[RetrievalCase], tools: Sequence[ToolSpec], *,
                   hard_negatives: int = 1, cross_language: bool = True, seed: int = 0
                   ) -> list[TrainingPair]:
    """Pairs of every case with each needed catalog tool, ``hard_negatives`` rows each."""
    if any(c.split != "train" for c in cases):
        raise ValueError("training pairs come from train cases only: "
                         f"{sorted(c.id for c in cases if c.split != 'train')}")
    views: list[CatalogView] = ["both", "en"] if cross_language else ["both"]
    pairs = []
    for view in views:
        view_tools = catalog_view(tools, view)
        texts = {t.name: tool_text(t) for t in view_tools}
        chosen = [c for c in cases if view == "both" or c.lang == "zh"]
        if not chosen:
            continue
        bm25 = ToolRetriever(view_tools)
        hits = bm25.search_many([c.request for c in chosen], hard_negatives + 8)
        for case, case_hits in zip(chosen, hits, strict=True):
            rng = random.Random(f"{seed}:{view}:{case.id}")
            for tool in case.tools:
                if tool not in texts:
                    continue
                for negative in _negatives(case, case_hits, bm25.names, hard_negatives, rng):
                    pairs.append(TrainingPair(case.request, texts[tool], texts[negative], tool,
                                              negative, case.id, view))
    return pairs
