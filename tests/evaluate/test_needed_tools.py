"""The position test's offers (``evaluate.closed_loop.needed_tools``): the tools a scenario's
ground truth calls moved before or after the environment's other tools, nothing else changed."""

from __future__ import annotations

from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import OfferedTools
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval
from agentune.tasks.verifier.rollout import ASK_USER

from support.scripted_agents import demo_records


def names(offer: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in offer]


def test_needed_tools_first_or_last_keep_the_offer_and_ask_user_last() -> None:
    catalog, records = demo_records("train")
    moved = 0
    for record in records:
        scenario = record.scenario
        needed = {c.name for c in scenario.calls()}
        offers = {where: names(OfferedTools(catalog, None, CandidateRetrieval(),
                                            needed=where)(scenario))
                  for where in ("catalog", "first", "last")}
        catalog_order = offers["catalog"]
        assert all(sorted(o) == sorted(catalog_order) for o in offers.values())
        assert all(o[-1] == ASK_USER for o in offers.values())
        count = len(needed & set(catalog_order))
        if not count:
            assert offers["first"] == offers["last"] == catalog_order
            continue
        assert set(offers["first"][:count]) == needed
        assert set(offers["last"][-1 - count:-1]) == needed
        others = [n for n in catalog_order if n not in needed]
        assert [n for n in offers["last"] if n not in needed] == others  # catalog order kept
        moved += offers["first"] != offers["last"]
    assert moved >= 3  # the demo's calling scenarios do move
