"""Training pairs come from train scenarios and verified trajectories only: no held-out or
reserved request, and no trajectory of one, ever becomes a pair; negatives are BM25's top hits
the request does not need; Chinese requests also pair with the English-only tool text."""

from __future__ import annotations

import pytest

from agentune.tasks.tool_retrieval.documents import english_only, tool_text
from agentune.tasks.tool_retrieval.pairs import (
    normalise,
    training_cases,
    training_pairs,
    trajectory_cases,
)
from agentune.tasks.tools.selection import ToolRetriever

from support.retrieval_cases import demo_cases


def _trajectory(id_: str, query: str, scenario: str | None, *names: str,
                verified: bool | None = True) -> dict:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
             for i, n in enumerate(names)]
    return {"id": id_, "query": query, "lang": "zh", "scenario_id": scenario,
            "verified": verified, "messages": [{"role": "user", "content": query},
                                               {"role": "assistant", "tool_calls": calls}]}


def test_pairs_leave_out_every_evaluation_request() -> None:
    catalog, cases = demo_cases()
    held = [c for c in cases if c.split != "train"]
    assert {c.split for c in held} == {"heldout", "reserved"} and len(held) >= 10
    some_held = held[0]
    rows = [
        _trajectory("t-train", "帮我查一下明天北京到上海的航班", None, "search_flights"),
        _trajectory("t-held-scenario", "另一种说法", some_held.id, "search_flights"),
        _trajectory("t-held-request", some_held.request.upper(), None, *some_held.tools),
        _trajectory("t-failed", "失败的那条", None, "search_trains", verified=False),
        _trajectory("t-no-catalog-tool", "问一下用户", None, "ask_user"),
    ]
    trajectories = trajectory_cases(rows, [t.name for t in catalog.tools()])
    assert [c.id for c in trajectories] == ["t-train", "t-held-scenario", "t-held-request"]
    links = {r["id"]: r["scenario_id"] for r in rows}
    kept, rejects = training_cases(cases, trajectories, trajectory_scenarios=links)
    assert sorted(r["id"] for r in rejects) == ["t-held-request", "t-held-scenario"]
    assert {c.split for c in kept} == {"train"} and "t-train" in {c.id for c in kept}
    pairs = training_pairs(kept, catalog.tools(), hard_negatives=2, seed=0)
    held_requests = {normalise(c.request) for c in held}
    assert pairs and not {normalise(p.anchor) for p in pairs} & held_requests
    # Reserved tools never appear as positives: no train scenario calls them.
    reserved = {c.tools[0] for c in held if c.split == "reserved"}
    assert not reserved & {p.tool for p in pairs}
    with pytest.raises(ValueError, match="train cases only"):
        training_pairs(held[:1], catalog.tools())


def test_negatives_are_bm25_hits_not_needed_and_zh_requests_get_cross_pairs() -> None:
    catalog, cases = demo_cases()
    tools = catalog.tools()
    train = [c for c in cases if c.split == "train"]
    pairs = training_pairs(train, tools, hard_negatives=1, seed=0)
    bm25 = ToolRetriever(tools)
    by_case = {c.id: c for c in train}
    for p in [p for p in pairs if p.view == "both"]:
        case = by_case[p.case_id]
        assert p.negative_tool not in case.tools and p.tool in case.tools
        hits = [n for n, _ in bm25.search(case.request, 20) if n not in case.tools]
        if hits:  # the best hit it does not need
            assert p.negative_tool == hits[0]
    cross = [p for p in pairs if p.view == "en"]
    assert cross and {by_case[p.case_id].lang for p in cross} == {"zh"}
    english = {t.name: tool_text(english_only(t)) for t in tools}
    assert all(p.positive == english[p.tool] and p.negative == english[p.negative_tool]
               for p in cross)
    assert training_pairs(train, tools, seed=0) == pairs  # seeded
    assert not [p for p in training_pairs(train, tools, cross_language=False) if p.view == "en"]
