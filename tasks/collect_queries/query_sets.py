"""Query sets: similar queries grouped into sets of a target size, each later seeding one
Meta-Agent template (MAT: "选取相似的数条 query 组成多个集合").

Queries are grouped by scenario (and, by default, language) first, then within a group greedily
by similarity: a seeded draw picks an anchor among the queries left, and the anchor's
``size - 1`` nearest neighbours (cosine over character n-gram counts) join it. What is left when
fewer than ``size`` remain is the group's last, thin set, which expansion tops up. One language
per set keeps the Meta-Agent's examples coherent and tells expansion which language to write.
The result depends only on the queries (not their order) and the seed; every query lands in
exactly one set.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from agentune.tasks.common.near_dedup import canonical_text, shingles
from agentune.tasks.common.schemas import QueryView

UNSPECIFIED = "unspecified"


@dataclass(frozen=True)
class QuerySet:
    set_id: str
    scenario: str | None
    lang: str | None
    """The members' language when sets are split by language, else None."""
    member_ids: tuple[str, ...]
    """Anchor first, then by similarity to it."""

    def shortfall(self, size: int) -> int:
        return max(0, size - len(self.member_ids))


def scenario_slug(scenario: str | None) -> str:
    """An id-safe form of a scenario name (non-ASCII names get a short hash)."""
    if scenario is None:
        return UNSPECIFIED
    slug = re.sub(r"[^a-z0-9]+", "_", scenario.lower()).strip("_")
    if slug and slug.isascii():
        return slug[:40]
    return "s" + hashlib.sha1(scenario.encode("utf-8")).hexdigest()[:8]


def _ngram_matrix(texts: Sequence[str], ngram: int) -> sparse.csr_matrix:
    """L2-normalised character n-gram count vectors, one row per text."""
    vocab: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for r, text in enumerate(texts):
        canon = canonical_text(text)
        counts: dict[int, int] = defaultdict(int)
        grams = (
            [canon[i : i + ngram] for i in range(len(canon) - ngram + 1)]
            if len(canon) > ngram
            else list(shingles(canon, ngram))
        )
        for g in grams:
            counts[vocab.setdefault(g, len(vocab))] += 1
        for c, v in counts.items():
            rows.append(r)
            cols.append(c)
            vals.append(float(v))
    m = sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), max(len(vocab), 1)))
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sparse.diags(1.0 / norms) @ m


def _group_similar(
    members: list[QueryView], size: int, rng: random.Random, ngram: int
) -> list[list[str]]:
    members = sorted(members, key=lambda m: m.id)  # input order must not matter
    matrix = _ngram_matrix([m.text for m in members], ngram).tocsr()
    left = list(range(len(members)))
    groups: list[list[str]] = []
    while left:
        anchor = left[rng.randrange(len(left))]
        rest = [i for i in left if i != anchor]
        nearest: list[int] = []
        if rest:
            sims = (matrix[rest] @ matrix[anchor].T).toarray().ravel()
            nearest = [rest[j] for j in np.argsort(-sims, kind="stable")[: size - 1]]
        groups.append([members[i].id for i in [anchor, *nearest]])
        taken = {anchor, *nearest}
        left = [i for i in left if i not in taken]
    return groups


def group_query_sets(
    queries: Sequence[QueryView],
    *,
    size: int = 5,
    seed: int = 0,
    ngram: int = 2,
    by_language: bool = True,
) -> list[QuerySet]:
    """Group queries into sets of ``size`` similar queries of one scenario (see module doc).

    Set ids read ``<scenario>-<lang>-<nnn>`` (``<scenario>-<nnn>`` without ``by_language``);
    sets come sorted by scenario, language, then number.
    """
    if size < 1:
        raise ValueError("size must be >= 1")
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        raise ValueError("query ids must be unique")
    groups: dict[tuple[str | None, str | None], list[QueryView]] = defaultdict(list)
    for q in queries:
        groups[(q.scenario, q.lang if by_language else None)].append(q)
    result: list[QuerySet] = []
    used_slugs: dict[str, str | None] = {}
    for scenario, lang in sorted(groups, key=lambda g: (g[0] is None, g[0] or "", g[1] or "")):
        slug = scenario_slug(scenario)
        if slug in used_slugs and used_slugs[slug] != scenario:
            slug = f"{slug}_{hashlib.sha1(str(scenario).encode()).hexdigest()[:6]}"
        used_slugs[slug] = scenario
        prefix = f"{slug}-{lang}" if by_language else slug
        # A generator per group: adding a scenario does not reshuffle the others.
        rng = random.Random(f"{seed}:{scenario}:{lang}")
        for k, members in enumerate(_group_similar(groups[(scenario, lang)], size, rng, ngram)):
            result.append(QuerySet(f"{prefix}-{k:03d}", scenario, lang, tuple(members)))
    return result
