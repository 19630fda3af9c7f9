"""recall@k and MRR of BM25, dense and hybrid retrieval on evaluation cases, per condition:

- ``all``: every case against the catalog as written;
- ``zh`` / ``en``: the requests of one language against the catalog as written;
- ``cross``: the Chinese requests against the English-only catalog (CJK stripped from every
  description), where BM25 has no shared word to match.

A case missing from the top 5 is reported as a miss, with what was retrieved instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.tasks.tool_retrieval.documents import CatalogView, catalog_view
from agentune.tasks.tool_retrieval.index import DenseIndex, HybridRetriever, Retriever
from agentune.tasks.tool_retrieval.metrics import recall_at_k, reciprocal_rank
from agentune.tasks.tool_retrieval.pairs import RetrievalCase
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.selection import ToolRetriever

CONDITIONS: dict[str, tuple[str | None, CatalogView]] = {
    "all": (None, "both"), "zh": ("zh", "both"), "en": ("en", "both"), "cross": ("zh", "en"),
}
RETRIEVERS = ("bm25", "dense", "hybrid")
MISS_K = 5


@dataclass
class RetrievalScores:
    rows: list[dict[str, Any]] = field(default_factory=list)
    """One per catalog, condition and retriever: n, recall@k for each k, mrr, misses."""
    misses: list[dict[str, Any]] = field(default_factory=list)
    """One per case and retriever whose needed tools are not all in the top 5."""


def retrievers_for(tools: Sequence[ToolSpec], encoder: Any | None) -> dict[str, Retriever]:
    """BM25 always; dense and hybrid when there is an encoder."""
    bm25 = ToolRetriever(tools)
    if encoder is None:
        return {"bm25": bm25}
    dense = DenseIndex(encoder, tools)
    return {"bm25": bm25, "dense": dense, "hybrid": HybridRetriever(bm25, dense)}


def score_retrieval(cases: Sequence[RetrievalCase], tools: Sequence[ToolSpec],
                    encoder: Any | None, *, catalog: str, ks: Sequence[int] = (1, 5, 10),
                    conditions: Sequence[str] = tuple(CONDITIONS)) -> RetrievalScores:
    """Every retriever on every condition that has cases; ``catalog`` labels the rows."""
    out = RetrievalScores()
    depth = max(*ks, MISS_K)
    for view in ("both", "en"):
        wanted = [c for c in conditions if CONDITIONS[c][1] == view]
        if not wanted:
            continue
        retrievers = retrievers_for(catalog_view(tools, view), encoder)
        for condition in wanted:
            lang = CONDITIONS[condition][0]
            chosen = [c for c in cases if lang is None or c.lang == lang]
            if not chosen:
                continue
            for name, retriever in retrievers.items():
                hits = retriever.search_many([c.request for c in chosen], depth)
                _score(out, chosen, [[n for n, _ in h] for h in hits], ks,
                       {"catalog": catalog, "tools": len(tools), "condition": condition,
                        "retriever": name})
    return out


def _score(out: RetrievalScores, cases: Sequence[RetrievalCase], ranked: list[list[str]],
           ks: Sequence[int], labels: dict[str, Any]) -> None:
    row: dict[str, Any] = {**labels, "n": len(cases)}
    for k in ks:
        row[f"recall@{k}"] = sum(recall_at_k(r, c.tools, k) for c, r in
                                 zip(cases, ranked, strict=True)) / len(cases)
    row["mrr"] = sum(reciprocal_rank(r, c.tools) for c, r in
                     zip(cases, ranked, strict=True)) / len(cases)
    missed = [(c, r) for c, r in zip(cases, ranked, strict=True)
              if recall_at_k(r, c.tools, MISS_K) < 1]
    row[f"misses@{MISS_K}"] = len(missed)
    out.rows.append(row)
    out.misses += [{**labels, "case": c.id, "split": c.split, "request": c.request,
                    "needed": list(c.tools), f"top{MISS_K}": r[:MISS_K]} for c, r in missed]


def retrieval_markdown(scores: RetrievalScores, *, title: str = "Tool retrieval") -> str:
    """The table of the report: recall@5 and MRR per catalog, condition and retriever."""
    lines = [f"## {title}", "",
             "| catalog | tools | condition | retriever | n | recall@5 | MRR | misses@5 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in scores.rows:
        lines.append(f"| {r['catalog']} | {r['tools']} | {r['condition']} | {r['retriever']} "
                     f"| {r['n']} | {r.get('recall@5', float('nan')):.3f} | {r['mrr']:.3f} "
                     f"| {r[f'misses@{MISS_K}']} |")
    return "\n".join(lines)
