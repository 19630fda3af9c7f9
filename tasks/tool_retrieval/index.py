"""The tool indexes: dense (an encoder's normalised embeddings in a FAISS flat inner-product
index, exact search) and hybrid (BM25 and dense fused by reciprocal rank).

Every retriever here has the interface of :class:`~agentune.tasks.tools.selection.ToolRetriever`
(``names``, ``len``, ``search_many(texts, k)``, ``search(text, k)`` giving ``(name, score)``
best first), so tool selection, synthesis and evaluation take any of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from agentune.tasks.tool_retrieval.documents import tool_text
from agentune.tasks.tools.catalog import ToolSpec

RRF_K = 60
"""The usual reciprocal-rank-fusion constant (Cormack et al. 2009)."""


class Retriever(Protocol):
    names: list[str]

    def __len__(self) -> int: ...

    def search_many(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]: ...

    def search(self, text: str, k: int) -> list[tuple[str, float]]: ...


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = RRF_K
                           ) -> list[tuple[str, float]]:
    """The union of the rankings, scored by the sum of ``1 / (k + rank)`` over the rankings
    that hold each name (rank from 1); ties broken by name."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, name in enumerate(ranking, 1):
            scores[name] = scores.get(name, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


class DenseIndex:
    """The catalog embedded once by ``encoder`` (a SentenceTransformer) in a FAISS
    ``IndexFlatIP`` over L2-normalised vectors: cosine similarity, exact."""

    def __init__(self, encoder: Any, tools: Sequence[ToolSpec], *, batch_size: int = 32) -> None:
        import faiss

        if not tools:
            raise ValueError("the catalog is empty")
        self.encoder = encoder
        self.batch_size = batch_size
        self.names = [t.name for t in tools]
        vectors = self._embed([tool_text(t) for t in tools])
        self._index = faiss.IndexFlatIP(vectors.shape[1])
        self._index.add(vectors)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.encoder.encode(list(texts), batch_size=self.batch_size,
                                      convert_to_numpy=True, normalize_embeddings=True,
                                      show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.names)

    def search_many(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        if not texts:
            return []
        k = max(1, min(k, len(self.names)))
        scores, ids = self._index.search(self._embed(texts), k)
        return [[(self.names[int(i)], float(s)) for i, s in zip(row_ids, row, strict=True)
                 if i >= 0] for row_ids, row in zip(ids, scores, strict=True)]

    def search(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search_many([text], k)[0]


class HybridRetriever:
    """BM25 and dense, each asked for its best ``pool`` tools, fused by reciprocal rank: the
    union of both lists, a tool both rank high first. A request BM25 finds no word for (a Chinese
    request against an English catalog) is ranked by the dense list alone."""

    def __init__(self, lexical: Retriever, dense: Retriever, *, pool: int = 100,
                 rrf_k: int = RRF_K) -> None:
        if lexical.names != dense.names:
            raise ValueError("the lexical and dense indexes must hold the same catalog")
        self.lexical, self.dense = lexical, dense
        self.names = list(dense.names)
        self.pool, self.rrf_k = pool, rrf_k

    def __len__(self) -> int:
        return len(self.names)

    def search_many(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        pool = max(self.pool, k)
        lexical = self.lexical.search_many(texts, pool)
        dense = self.dense.search_many(texts, pool)
        return [reciprocal_rank_fusion([[n for n, _ in lex], [n for n, _ in den]],
                                       self.rrf_k)[:k]
                for lex, den in zip(lexical, dense, strict=True)]

    def search(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search_many([text], k)[0]
