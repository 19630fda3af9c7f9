"""Candidate tool subsets: likely tools + distractors, BM25 retrieval over large catalogs."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import pytest

from agentune.config.collect_queries import CollectQueriesConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.collect_queries.seed_queries import load_seed_queries
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.tools.catalog import ToolSpec, validate_tool_catalog
from agentune.tasks.tools.selection import (
    ToolRetriever,
    retrieval_tokens,
    scenario_tool_profile,
    select_tools,
)


@dataclass(frozen=True)
class Q:
    id: str
    text: str
    scenario: str | None = None
    tool_hints: tuple[str, ...] | None = None


# Tools planted in the generated catalog, and a query each should be found for.
TARGETS = {
    "get_tide_table": (
        "Tide tables: high and low tide times for a harbour. 查询港口潮汐涨潮退潮时间。",
        ["When is high tide in the harbour at Qingdao tomorrow?", "青岛港明天什么时候涨潮？"],
    ),
    "lookup_vin_decoder": (
        "Decode a vehicle identification number (VIN) into make, model and year.",
        ["Decode this VIN and tell me the car's model year."],
    ),
    "convert_recipe_servings": (
        "Scale a cooking recipe to a different number of servings. 菜谱份量换算。",
        [
            "Scale my pancake recipe from 4 servings to 10 servings.",
            "把这个菜谱的份量换算成六人份。",
        ],
    ),
    "check_parcel_tracking": (
        "Track a parcel shipment by tracking number with the courier. 快递物流查询。",
        ["Track my parcel shipment with the courier.", "帮我查一下快递物流到哪了。"],
    ),
}

WORDS = (
    "account invoice ticket order report metric sensor device queue cluster bucket record user "
    "product catalog inventory shipment payment refund coupon review rating message channel "
    "playlist episode article comment profile session token license contract policy claim asset "
    "sprint issue release build pipeline deployment alert incident backup snapshot volume"
).split()
VERBS = "get list create update delete search sync export import archive validate summarize".split()


def generated_catalog(n: int = 2000, seed: int = 0) -> list[ToolSpec]:
    rng = random.Random(seed)
    entries = []
    for i in range(n - len(TARGETS)):
        verb, noun, other = rng.choice(VERBS), rng.choice(WORDS), rng.choice(WORDS)
        entries.append(
            {
                "type": "function",
                "function": {
                    "name": f"{verb}_{noun}_{i}",
                    "description": f"{verb.capitalize()} a {noun} of the {other} service "
                    f"({rng.choice(WORDS)}, {rng.choice(WORDS)}).",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            f"{noun}_id": {"type": "string", "description": f"The {noun}."}
                        },
                        "required": [f"{noun}_id"],
                    },
                },
            }
        )
    for name, (description, _) in TARGETS.items():
        entries.insert(
            rng.randrange(len(entries)),
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        )
    return validate_tool_catalog([(f"tool {i}", e) for i, e in enumerate(entries)])


@pytest.fixture(scope="module")
def big_catalog() -> list[ToolSpec]:
    return generated_catalog()


def test_tokens_cover_both_languages() -> None:
    assert retrieval_tokens("get_weather forecasts for the cities") == [
        "weather",
        "forecast",
        "city",
    ]
    assert retrieval_tokens("searchFlights") == ["search", "flight"]
    assert retrieval_tokens("明天天气") == ["明", "天", "天", "气", "明天", "天天", "天气"]


def test_bm25_finds_the_right_tool_in_a_2000_tool_catalog(big_catalog: list[ToolSpec]) -> None:
    assert len(big_catalog) == 2000
    start = time.perf_counter()
    retriever = ToolRetriever(big_catalog)
    queries = [(name, q) for name, (_, qs) in TARGETS.items() for q in qs]
    hits = retriever.search_many([q for _, q in queries], k=5)
    elapsed = time.perf_counter() - start
    for (name, query), found in zip(queries, hits, strict=True):
        assert found and found[0][0] == name, (query, found)
    assert elapsed < 10


def test_candidate_subsets_on_a_2000_tool_catalog(big_catalog: list[ToolSpec]) -> None:
    rng = random.Random(1)
    names = [t.name for t in big_catalog]
    targeted = [q for _, qs in TARGETS.values() for q in qs]
    queries = [Q(f"t{i}", q) for i, q in enumerate(targeted)]
    queries += [
        Q(
            f"h{i}",
            f"please {rng.choice(VERBS)} the {rng.choice(WORDS)}",
            "ops",
            tuple(rng.sample(names, rng.randint(0, 2))),
        )
        for i in range(300)
    ]
    rules = CollectQueriesConfig(tools_min=4, tools_max=12, hard_distractor_ratio=0.5)
    start = time.perf_counter()
    choices = select_tools(queries, big_catalog, rules=rules, seed=5)
    assert time.perf_counter() - start < 20
    known = set(names)
    sizes = set()
    for q in queries:
        choice = choices[q.id]
        assert len(set(choice.tool_ids)) == len(choice.tool_ids)
        assert set(choice.tool_ids) <= known
        assert set(choice.likely_tool_ids) <= set(choice.tool_ids)
        assert rules.tools_min <= len(choice.tool_ids) <= rules.tools_max
        if q.tool_hints is not None:
            assert choice.likely_tool_ids == q.tool_hints
        sizes.add(len(choice.tool_ids))
    assert len(sizes) >= 5  # sizes vary across the range
    for q in queries[: len(targeted)]:  # retrieval supplies the likely tool without hints
        target = next(n for n, (_, qs) in TARGETS.items() if q.text in qs)
        assert target in choices[q.id].likely_tool_ids
    # Deterministic per seed, whatever else is in the batch; another seed differs.
    again = select_tools(queries[::-1], big_catalog, rules=rules, seed=5)
    assert again == choices
    other = select_tools(queries, big_catalog, rules=rules, seed=6)
    assert other != choices


def test_hints_scenario_profile_and_no_tool_queries() -> None:
    tools = load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml").training_tools()
    seeds = load_seed_queries(PROJECT_ROOT / "data" / "demo" / "queries.jsonl")
    profile = scenario_tool_profile(seeds)
    assert profile["weather"] == ["get_weather"]
    assert "no_tool" not in profile
    queries = [
        Q(
            "hinted",
            "帮我订一张周五去上海的机票",
            "travel_booking",
            ("search_flights", "book_flight"),
        ),
        Q("none", "写一首关于秋天的诗", "no_tool", ()),
        Q("weather", "后天广州会下暴雨吗？", "weather", None),
        Q("hotel", "Find me a quiet hotel near the old town in Prague", "travel_booking", None),
        Q("unknown", "What is the exchange rate of yen to euros?", None, None),
    ]
    rules = CollectQueriesConfig(tools_min=3, tools_max=6)
    choices = select_tools(queries, tools, rules=rules, seed=0, profile=profile)
    assert choices["hinted"].likely_tool_ids == ("search_flights", "book_flight")
    assert choices["none"].likely_tool_ids == ()
    assert 3 <= len(choices["none"].tool_ids) <= 6
    assert choices["weather"].likely_tool_ids == ("get_weather",)
    assert "search_hotels" in choices["hotel"].likely_tool_ids
    assert choices["unknown"].likely_tool_ids[0] == "currency_convert"


def test_hard_distractors_come_from_retrieval(big_catalog: list[ToolSpec]) -> None:
    query = Q("q", "Track my parcel shipment with the courier.", None, ("get_tide_table",))
    retriever = ToolRetriever(big_catalog)
    top = [name for name, _ in retriever.search(query.text, 50) if name != "get_tide_table"]
    hard = select_tools(
        [query],
        big_catalog,
        seed=0,
        retriever=retriever,
        rules=CollectQueriesConfig(tools_min=5, tools_max=5, hard_distractor_ratio=1.0),
    )
    assert set(hard["q"].tool_ids) == {"get_tide_table", *top[:4]}
    easy = select_tools(
        [query],
        big_catalog,
        seed=0,
        retriever=retriever,
        rules=CollectQueriesConfig(tools_min=5, tools_max=5, hard_distractor_ratio=0.0),
    )
    assert len(easy["q"].tool_ids) == 5 and "get_tide_table" in easy["q"].tool_ids
    assert not set(easy["q"].tool_ids) & set(top[:4])  # random picks from 2,000 miss the top 4


def test_subset_sizes_are_bounded_by_the_catalog_and_the_likely_tools() -> None:
    tools = load_environments(PROJECT_ROOT / "data" / "demo" / "tools.yaml").training_tools()
    many = tuple(t.name for t in tools[:10])
    choices = select_tools(
        [Q("a", "anything at all", None, many), Q("b", "anything else", None, ())],
        tools,
        rules=CollectQueriesConfig(tools_min=2, tools_max=4),
    )
    assert len(choices["a"].tool_ids) == 10  # all likely tools stay even above max_tools
    all_of_them = select_tools(
        [Q("c", "anything", None, ())], tools,
        rules=CollectQueriesConfig(tools_min=50, tools_max=60),
    )
    assert sorted(all_of_them["c"].tool_ids) == sorted(t.name for t in tools)
    with pytest.raises(ValueError):
        CollectQueriesConfig(tools_min=5, tools_max=2)
    with pytest.raises(ValueError, match="unique"):
        select_tools([Q("a", "x"), Q("a", "y")], tools)
