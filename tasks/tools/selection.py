"""Candidate tool subsets per query: the tools it likely needs plus distractors.

MAT varies the Tools variable of every training input, so each query gets a subset of the
catalog of a size drawn from a range: its likely tools (hints, else its scenario's usual tools
ranked by retrieval, else the best retrieval hits), some hard distractors (tools that retrieval
ranks high for the query but that it does not need) and random ones. Retrieval is BM25 (bm25s)
over tool names and descriptions, so a 2,000-tool catalog is searched, never listed whole.
A query with hints ``[]`` needs no tool: its subset is all distractors.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agentune.config.collect_queries import CollectQueriesConfig
from agentune.tasks.common.schemas import QueryView
from agentune.tasks.tools.bm25 import BM25
from agentune.tasks.tools.catalog import ToolSpec

if TYPE_CHECKING:  # the tool_retrieval package builds on this one
    from agentune.tasks.tool_retrieval.index import Retriever

_STOPWORDS = frozenset(
    "a an and are as at be by do does for from get give how i in into is it its me my of on or "
    "please the this to up use what when where which who will with you your".split()
)
_LATIN_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _stem(word: str) -> str:
    """Plural to singular, enough to match "flights" with "flight"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def retrieval_tokens(text: str) -> list[str]:
    """Tokens for BM25 in both languages: Latin words (``snake_case`` and ``camelCase`` split,
    lower-cased, plurals folded, stop words and numbers dropped) and, for Chinese runs,
    character unigrams and bigrams (no segmenter needed)."""
    tokens = [
        _stem(w.lower())
        for w in _LATIN_WORD.findall(text)
        if len(w) > 1 and w.lower() not in _STOPWORDS
    ]
    for run in _CJK_RUN.findall(text):
        tokens.extend(run)
        tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
    return tokens


def tool_document(tool: ToolSpec) -> str:
    """The text a tool is retrieved by."""
    props = tool.parameters.get("properties", {})
    params = " ".join(
        f"{name} {spec.get('description', '') if isinstance(spec, dict) else ''}"
        for name, spec in props.items()
    )
    return f"{tool.name.replace('_', ' ')} {tool.description} {params}"


class ToolRetriever:
    """BM25 over each tool's name (its words), description, and parameter names and
    descriptions (they carry words such as "city" or "date" that queries use)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        if not tools:
            raise ValueError("the catalog is empty")
        self.names = [t.name for t in tools]
        corpus = [retrieval_tokens(tool_document(t)) for t in tools]
        self._bm25 = BM25()
        self._bm25.index(corpus, show_progress=False)

    def __len__(self) -> int:
        return len(self.names)

    def search_many(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """For each text, up to ``k`` tools with a positive score, best first."""
        tokens = [retrieval_tokens(t) for t in texts]
        asked = [i for i, toks in enumerate(tokens) if toks]  # no words, no hits
        out: list[list[tuple[str, float]]] = [[] for _ in texts]
        if not asked:
            return out
        k = max(1, min(k, len(self.names)))
        docs, scores = self._bm25.retrieve([tokens[i] for i in asked], k=k, show_progress=False)
        for i, doc_row, score_row in zip(asked, np.asarray(docs), np.asarray(scores), strict=True):
            pairs = zip(doc_row, score_row, strict=True)
            out[i] = [(self.names[int(d)], float(s)) for d, s in pairs if s > 0]
        return out

    def search(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search_many([text], k)[0]


@dataclass(frozen=True)
class ToolChoice:
    tool_ids: tuple[str, ...]
    """The candidate subset, shuffled so the needed tools are not always first."""
    likely_tool_ids: tuple[str, ...]


def scenario_tool_profile(queries: Iterable[QueryView]) -> dict[str, list[str]]:
    """For each scenario, the tools its hinted queries use, most used first (ties by name)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for q in queries:
        if q.scenario is not None and q.tool_hints:
            counts[q.scenario].update(q.tool_hints)
    return {
        s: [name for name, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]
        for s, c in counts.items()
    }


def _likely_tools(
    q: QueryView,
    hits: list[tuple[str, float]],
    profile: dict[str, list[str]],
    rules: CollectQueriesConfig,
) -> list[str]:
    if q.tool_hints is not None:
        return list(q.tool_hints)
    usual = profile.get(q.scenario or "", [])
    if usual:
        # The scenario's usual tools that retrieval also finds for this query, best first;
        # if retrieval finds none of them, the scenario's most used tool.
        ranked = [name for name, _ in hits if name in usual][: rules.likely_tools_max]
        return ranked or usual[:1]
    return [name for name, _ in hits[: rules.likely_tools_max]]


def _random_fill(
    rng: random.Random, names: Sequence[str], taken: set[str], count: int
) -> list[str]:
    """``count`` random tools not in ``taken``, without listing a large catalog."""
    free = len(names) - len(taken)
    count = min(count, free)
    if count <= 0:
        return []
    if count * 2 > free:  # dense draw from a small catalog: list what is left
        return rng.sample([n for n in names if n not in taken], count)
    picked: list[str] = []
    seen = set(taken)
    while len(picked) < count:
        name = names[rng.randrange(len(names))]
        if name not in seen:
            seen.add(name)
            picked.append(name)
    return picked


def select_tools(
    queries: Sequence[QueryView],
    tools: Sequence[ToolSpec],
    *,
    rules: CollectQueriesConfig | None = None,
    seed: int = 0,
    retriever: Retriever | None = None,
    profile: dict[str, list[str]] | None = None,
) -> dict[str, ToolChoice]:
    """A :class:`ToolChoice` per query id; the same for the same query, catalog, seed and
    scenario profile whatever the other queries are (each query draws from its own seeded
    generator). ``rules``: the subset sizes, likely tools, hard distractors and retrieval pool
    (collect_queries' settings; None: their defaults). The profile defaults to the one of
    ``queries``' own hints."""
    if len({q.id for q in queries}) != len(queries):
        raise ValueError("query ids must be unique")
    rules = rules or CollectQueriesConfig()
    retriever = retriever or ToolRetriever(tools)
    profile = scenario_tool_profile(queries) if profile is None else profile
    known = set(retriever.names)
    all_hits = retriever.search_many([q.text for q in queries], rules.retrieval_pool)
    choices: dict[str, ToolChoice] = {}
    for q, hits in zip(queries, all_hits, strict=True):
        rng = random.Random(f"{seed}:{q.id}")
        likely = [n for n in dict.fromkeys(_likely_tools(q, hits, profile, rules)) if n in known]
        size = rng.randint(rules.tools_min, rules.tools_max)
        size = min(max(size, len(likely)), len(retriever))
        n_distract = size - len(likely)
        n_hard = round(n_distract * rules.hard_distractor_ratio)
        taken = set(likely)
        hard = [name for name, _ in hits if name not in taken][:n_hard]
        taken.update(hard)
        extra = _random_fill(rng, retriever.names, taken, n_distract - len(hard))
        subset = [*likely, *hard, *extra]
        rng.shuffle(subset)
        choices[q.id] = ToolChoice(tuple(subset), tuple(likely))
    return choices
