"""Preference pairs: one decision apart, the higher reward chosen, the margin kept, every skip
counted; the registry's rewards rank them."""

from __future__ import annotations

from collections import Counter

import pytest

from agentune.config.verifier import RewardConfig
from agentune.tasks.build_preferences.pairs import (
    Candidate,
    build_pairs,
    decision_point,
    margin_histogram,
)
from agentune.tasks.build_preferences.stage import attempt_candidates
from agentune.tasks.verifier.rewards import RewardModel

from support.preference_data import attempt_rows


def _c(cid: str, messages: list[dict], reward: float, scenario: str = "s1") -> Candidate:
    return Candidate(id=cid, source="attempts", scenario_id=scenario, kind="single_call",
                     lang="en", messages=messages, tools=[], reward=reward, components={})


USER = {"role": "user", "content": "weather in Paris?"}


def _call(city: str, call_id: str = "c1") -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": "weather", "arguments": f'{{"city": "{city}"}}'}}]}


def test_the_decision_point_ignores_call_ids_and_needs_assistant_messages() -> None:
    a = [USER, _call("Paris", "x1"), {"role": "tool", "content": "sun"},
         {"role": "assistant", "content": "Sunny."}]
    b = [USER, _call("Paris", "call_0_0"), {"role": "tool", "content": "sun"},
         {"role": "assistant", "content": "It rains."}]
    assert decision_point(a, b) == (3, None)
    c = [USER, _call("Paris"), {"role": "tool", "content": "rain"},
         {"role": "assistant", "content": "It rains."}]
    assert decision_point(a, c) == (None, "differ_at_observation")
    assert decision_point(a, a[:2]) == (None, "no_decision_point")


def test_pairs_take_the_higher_reward_keep_the_margin_and_count_skips() -> None:
    right = [USER, _call("Paris"), {"role": "tool", "content": "sun"},
             {"role": "assistant", "content": "Sunny in Paris."}]
    wrong_arg = [USER, _call("Lyon"), {"role": "tool", "content": "sun"},
                 {"role": "assistant", "content": "Sunny."}]
    vague = right[:3] + [{"role": "assistant", "content": "Sunny."}]
    built = build_pairs([_c("a0", right, 1.0), _c("a1", wrong_arg, 0.3), _c("a2", vague, 0.95)],
                        min_margin=0.1, max_pairs_per_scenario=8, val_ratio=0.0, seed=0)
    # a0 vs a1 and a2 vs a1 are the same preference (Paris over Lyon after the request): once.
    assert len(built.rows) == 1 and built.skipped["duplicate"] == 1
    first = built.rows[0]
    assert first["chosen_id"] == "a0" and first["rejected_id"] == "a1" and first["decision"] == 1
    assert first["prompt"] == [USER]
    assert first["chosen"][0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert first["rejected"][0]["tool_calls"][0]["function"]["arguments"] == {"city": "Lyon"}
    assert first["margin"] == pytest.approx(0.7)
    assert built.skipped["below_margin"] == 1  # a0 vs a2: 0.05 apart
    stats = built.stats()
    assert stats["by_kind"] == {"single_call": 1} and stats["by_source"] == {"attempts": 1}
    assert sum(b["pairs"] for b in stats["margin_histogram"]) == 1


def test_the_cap_keeps_the_widest_margins() -> None:
    base = [USER]
    cands = [_c(f"a{i}", base + [{"role": "assistant", "content": f"answer {i}"}], i / 10)
             for i in range(6)]
    built = build_pairs(cands, min_margin=0.1, max_pairs_per_scenario=3, val_ratio=0.0, seed=0)
    assert sorted(r["margin"] for r in built.rows) == pytest.approx([0.4, 0.4, 0.5])
    assert built.skipped["over_cap"] == 15 - 3


def test_margin_histogram_bins() -> None:
    hist = margin_histogram([0.1, 0.15, 0.6, 3.0])
    assert {b["margin"]: b["pairs"] for b in hist if b["pairs"]} == {
        "[0.1, 0.2)": 2, "[0.5, 0.75)": 1, ">= 2": 1}


def test_planted_attempts_pair_right_against_wrong_by_the_verifier_reward() -> None:
    rows = attempt_rows(["trv-book-cheapest-flight", "cal-events-jun3"])
    reward = RewardModel.from_config(RewardConfig())
    candidates = attempt_candidates(rows, reward, {})
    built = build_pairs(candidates, min_margin=0.1, max_pairs_per_scenario=50, val_ratio=0.0,
                        seed=0)
    assert built.rows
    variant = {r["id"]: r["variant"] for r in rows}
    for pair in built.rows:
        assert pair["chosen_reward"] - pair["rejected_reward"] >= 0.1 - 1e-9
        assert pair["prompt"][-1]["role"] in ("user", "tool")
        assert pair["chosen"][0]["role"] == pair["rejected"][0]["role"] == "assistant"
    chosen = Counter(variant[r["chosen_id"]] for r in built.rows)
    # The right trajectory is never rejected.
    assert "right" not in {variant[r["rejected_id"]] for r in built.rows}
    assert chosen["right"] >= 2
    # Another reward ranks differently: format only sees no difference between these.
    fmt = RewardModel.from_config(RewardConfig(functions=["format"]))
    only_format = build_pairs(attempt_candidates(rows, fmt, {}), min_margin=0.1,
                              max_pairs_per_scenario=50, val_ratio=0.0, seed=0)
    assert len(only_format.rows) < len(built.rows)
