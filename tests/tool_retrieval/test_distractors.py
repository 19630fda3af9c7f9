"""Distractor catalogs: as many tools as asked, unique names, never a catalog name, seeded."""

from __future__ import annotations

import pytest

from agentune.tasks.tool_retrieval.distractors import CAPACITY, distractor_tools, with_distractors

from support.retrieval_cases import demo_catalog


def test_a_catalog_grows_to_the_asked_size_without_clashes() -> None:
    tools = demo_catalog().tools()
    grown = with_distractors(tools, 1000, seed=3)
    names = [t.name for t in grown]
    assert len(grown) == 1000 and len(set(names)) == 1000
    assert grown[: len(tools)] == tools
    assert names == [t.name for t in with_distractors(tools, 1000, seed=3)]
    assert names != [t.name for t in with_distractors(tools, 1000, seed=4)]
    assert all(t.description and "required" in t.parameters for t in grown[len(tools):])
    assert with_distractors(tools, 10) == tools  # already that big: unchanged
    clash = distractor_tools(1, seed=0)[0].name
    assert clash not in {t.name for t in distractor_tools(5, seed=0, avoid=[clash])}


def test_more_than_the_vocabulary_allows_is_refused() -> None:
    assert CAPACITY >= 10_000
    with pytest.raises(ValueError, match="at most"):
        distractor_tools(CAPACITY + 1)
