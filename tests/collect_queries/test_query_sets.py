"""Query sets: a deterministic partition into similar-query sets of the target size."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass

import pytest

from agentune.paths import PROJECT_ROOT
from agentune.tasks.collect_queries.query_sets import group_query_sets, scenario_slug
from agentune.tasks.common.text_cleaning import detect_language


@dataclass(frozen=True)
class Q:
    id: str
    text: str
    scenario: str | None
    lang: str


def demo_queries() -> list[Q]:
    lines = (PROJECT_ROOT / "data" / "demo" / "queries.jsonl").read_text("utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        row = json.loads(line)
        out.append(Q(f"q{i:03d}", row["text"], row["scenario"], detect_language(row["text"])))
    return out


def test_same_input_and_seed_give_the_same_sets_whatever_the_order() -> None:
    queries = demo_queries()
    first = group_query_sets(queries, size=5, seed=11)
    shuffled = queries[:]
    random.Random(3).shuffle(shuffled)
    assert group_query_sets(shuffled, size=5, seed=11) == first
    assert group_query_sets(queries, size=5, seed=11) == first
    assert group_query_sets(queries, size=5, seed=12) != first  # the seed matters


@pytest.mark.parametrize(("size", "by_language"), [(5, True), (3, True), (5, False), (1, True)])
def test_every_query_is_in_exactly_one_set(size: int, by_language: bool) -> None:
    queries = demo_queries()
    sets = group_query_sets(queries, size=size, seed=0, by_language=by_language)
    members = Counter(qid for s in sets for qid in s.member_ids)
    assert set(members) == {q.id for q in queries} and set(members.values()) == {1}
    assert len({s.set_id for s in sets}) == len(sets)
    by_id = {q.id: q for q in queries}
    groups: Counter[tuple[str | None, str | None]] = Counter()
    for s in sets:
        assert 1 <= len(s.member_ids) <= size
        assert {by_id[m].scenario for m in s.member_ids} == {s.scenario}
        if by_language:
            assert {by_id[m].lang for m in s.member_ids} == {s.lang}
            assert s.set_id.startswith(f"{scenario_slug(s.scenario)}-{s.lang}-")
        else:
            assert s.lang is None
        if len(s.member_ids) < size:  # at most one thin set per group
            groups[(s.scenario, s.lang)] += 1
    assert all(n == 1 for n in groups.values())


def test_similar_queries_end_up_together() -> None:
    weather = [
        "北京明天天气怎么样",
        "北京明天天气如何",
        "北京明天的天气好吗",
        "北京明天天气冷不冷",
        "北京明天天气热不热",
    ]
    stocks = [
        "腾讯股票价格多少",
        "腾讯股票价格涨了吗",
        "腾讯的股票价格跌了吗",
        "腾讯股票价格今天如何",
        "腾讯股票价格本周走势",
    ]
    queries = [Q(f"w{i}", t, "mixed", "zh") for i, t in enumerate(weather)]
    queries += [Q(f"s{i}", t, "mixed", "zh") for i, t in enumerate(stocks)]
    for seed in range(5):
        sets = group_query_sets(queries, size=5, seed=seed)
        assert sorted("".join(sorted({m[0] for m in s.member_ids})) for s in sets) == ["s", "w"]


def test_scenario_slugs_and_unspecified_scenario() -> None:
    assert scenario_slug("Travel Booking!") == "travel_booking"
    assert scenario_slug(None) == "unspecified"
    assert scenario_slug("天气查询").startswith("s") and len(scenario_slug("天气查询")) == 9
    sets = group_query_sets(
        [Q("a", "first query", None, "en"), Q("b", "天气查询的问题", "天气查询", "zh")], size=5
    )
    assert [s.set_id for s in sets] == [f"{scenario_slug('天气查询')}-zh-000", "unspecified-en-000"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unique"):
        group_query_sets([Q("a", "x", None, "en"), Q("a", "y", None, "en")])
    with pytest.raises(ValueError, match="size"):
        group_query_sets([Q("a", "x", None, "en")], size=0)
