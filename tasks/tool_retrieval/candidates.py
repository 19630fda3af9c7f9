"""The retriever that picks candidate tools where a stage chooses them: collect_queries' tool
subsets, synthesis' ``tool_retrieval`` combinations and the tools the closed loop offers when
``evaluate.closed_loop.max_tools`` caps them. BM25 alone, or BM25 and a published ``retriever``'s
encoder fused by reciprocal rank (hybrid) when the stage's ``retriever`` setting names one.

A :class:`CandidateRetrieval` is the recipe (the encoder's folder, or none), not the index: it
pickles to the processes or Dask workers a stage maps over, and each builds its index from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef
from agentune.tasks.tool_retrieval.documents import tool_text
from agentune.tasks.tool_retrieval.encoder import ENCODER_FOLDER, load_encoder
from agentune.tasks.tool_retrieval.evaluation import retrievers_for
from agentune.tasks.tool_retrieval.index import Retriever
from agentune.tasks.tools.catalog import ToolSpec


@dataclass(frozen=True)
class CandidateRetrieval:
    encoder_dir: str | None = None
    """A sentence-transformers folder (a ``retriever`` version's ``encoder/``); none: BM25."""

    @property
    def name(self) -> str:
        return "bm25" if self.encoder_dir is None else "hybrid"

    def index(self, tools: Sequence[ToolSpec]) -> Retriever:
        """The catalog indexed for search: BM25, or hybrid. A hybrid index is kept per process
        for the catalog it was built on: every chunk a worker maps over searches the same
        catalog, which is embedded once, not once a chunk."""
        if self.encoder_dir is None:
            return retrievers_for(tools, None)["bm25"]
        key = (self.encoder_dir, tuple(tool_text(t) for t in tools))
        index = _HYBRID.get(key)
        if index is None:  # held in a local: a thread indexing another catalog may clear the dict
            index = retrievers_for(tools, _encoder(self.encoder_dir))["hybrid"]
            _HYBRID.clear()  # one catalog at a time: an index of 10,000 tools is large
            _HYBRID[key] = index
        return index


_HYBRID: dict[tuple[str, tuple[str, ...]], Retriever] = {}


@lru_cache(maxsize=2)
def _encoder(folder: str) -> Any:
    """One load per process: a stage indexes several catalogs (environments, chunks)."""
    return load_encoder(folder)


def candidate_retrieval(store: ArtifactStore, ref: str | None
                        ) -> tuple[CandidateRetrieval, VersionRef | None]:
    """The retrieval a stage's ``retriever`` setting asks for, and the version it resolved to
    (a parent of what the stage publishes); a missing version is the store's error."""
    if ref is None:
        return CandidateRetrieval(), None
    resolved = store.resolve(ref)
    return CandidateRetrieval(str(store.file(resolved, ENCODER_FOLDER))), resolved
