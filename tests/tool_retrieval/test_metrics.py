"""recall@k and reciprocal rank on hand-checked rankings."""

from __future__ import annotations

import pytest

from agentune.tasks.tool_retrieval.metrics import recall_at_k, reciprocal_rank


def test_recall_and_reciprocal_rank_by_hand() -> None:
    ranked = ["web_search", "search_flights", "get_weather", "book_flight", "search_trains"]
    needed = {"search_flights", "book_flight"}
    assert recall_at_k(ranked, needed, 1) == 0.0
    assert recall_at_k(ranked, needed, 2) == 0.5   # search_flights at rank 2
    assert recall_at_k(ranked, needed, 3) == 0.5
    assert recall_at_k(ranked, needed, 4) == 1.0   # book_flight at rank 4
    assert reciprocal_rank(ranked, needed) == 0.5  # first needed tool at rank 2
    assert reciprocal_rank(ranked, {"cancel_order"}) == 0.0  # a miss counts zero
    assert recall_at_k([], {"get_weather"}, 5) == 0.0


def test_recall_needs_a_relevant_tool() -> None:
    with pytest.raises(ValueError, match="relevant"):
        recall_at_k(["a"], set(), 5)
