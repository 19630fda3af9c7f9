"""The search tool on a search-R1 style retrieval server (``POST /retrieve``).

Request: ``{"queries": [...], "topk": k, "return_scores": true}``. Answer: ``{"result": [[hit, ...]
per query]}`` where a hit is ``{"document": doc, "score": s}`` (or the bare ``doc`` when scores are
not returned) and ``doc`` is ``{"id", "contents"}`` with ``contents`` = ``'"Title"\\ntext'`` (the
wiki-18 corpus layout), or carries ``title`` and ``text`` / ``contents`` fields separately, or is a
plain string. The observation has the same shape as the local search's (``results`` with
``title`` and ``snippet``).
"""

from __future__ import annotations

from typing import Any

from agentune.config.tools import RetrievalConfig
from agentune.tasks.tools.http import HttpToolService
from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind


def retrieve_request(query: str, topk: int) -> dict[str, Any]:
    return {"queries": [query], "topk": topk, "return_scores": True}


def _passage(doc: Any) -> dict[str, Any]:
    if isinstance(doc, str):
        title, _, text = doc.partition("\n")
        return {"title": title.strip().strip('"'), "snippet": text.strip()}
    if not isinstance(doc, dict):
        raise ValueError(f"a document must be an object or a string, got {type(doc).__name__}")
    contents = str(doc.get("contents") or doc.get("text") or "")
    title = doc.get("title")
    if title is None:
        title, _, contents = contents.partition("\n")
    passage = {"title": str(title).strip().strip('"'), "snippet": contents.strip()}
    if doc.get("id") is not None:
        passage["id"] = str(doc["id"])
    return passage


def read_retrieve_answer(answer: Any, url: str) -> list[dict[str, Any]]:
    """The passages of the first (only) query of a ``/retrieve`` answer."""
    try:
        hits = answer["result"][0]
        if not isinstance(answer["result"], list) or not isinstance(hits, list):
            raise TypeError("`result` must be a list of hit lists")
        passages = []
        for hit in hits:
            has_score = isinstance(hit, dict) and "document" in hit
            passage = _passage(hit["document"] if has_score else hit)
            if has_score and hit.get("score") is not None:
                passage["score"] = round(float(hit["score"]), 4)
            passages.append(passage)
        return passages
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ToolFailure(
            "http", f"{url}: not a retrieve answer ({exc}): {str(answer)[:200]}"
        ) from None


class RetrievalSearch:
    """Backend of a catalog tool with a ``query`` and optional ``num_results`` arguments."""

    kind: ToolKind = "http"
    required: tuple[str, ...] = ("query",)

    def __init__(self, config: RetrievalConfig) -> None:
        self.config = config
        self.service = HttpToolService(config)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        query = str(arguments["query"])
        topk = int(arguments.get("num_results") or self.config.topk)
        answer = await self.service.post(retrieve_request(query, topk))
        return {"query": query, "results": read_retrieve_answer(answer, self.config.url)}

    async def aclose(self) -> None:
        await self.service.aclose()
