"""The reward registry: built-ins read the verdict, a user's function is found by import path,
a weighted list sums, and every term's version is in the lineage."""

from __future__ import annotations

import pytest

from agentune.config.verifier import RewardConfig
from agentune.tasks.verifier import VERSION
from agentune.tasks.verifier.rewards import RewardError, RewardModel, verdict_of_row
from agentune.tasks.verifier.rollout import from_messages
from agentune.tasks.verifier.verify import Verdict


def _verdict(**components: float) -> Verdict:
    base = {"task_completion": 1.0, "tool_accuracy": 1.0, "efficiency": 1.0,
            "timing_quality": 1.0, "format_compliance": 1.0, "execution": 1.0, "state": 1.0,
            "answer": 1.0}
    return Verdict(components=base | components, penalties={"wrong_tool": False},
                   reward=0.8, passed=True)


def test_builtins_read_the_verdict() -> None:
    verdict = _verdict(state=0.0, task_completion=0.5, format_compliance=0.75)
    for name, expected in [("verifier", 0.8), ("state_match", 0.0), ("format", 0.75),
                           ("outcome", -1.0), ("retool_reward", -1.0)]:
        model = RewardModel.from_config(RewardConfig(functions=[name]))
        assert model.score(verdict).total == pytest.approx(expected), name
    assert RewardModel.from_config(RewardConfig(functions=["outcome"])).score(
        _verdict()).total == 1.0


def test_a_weighted_list_sums_and_names_every_version() -> None:
    config = RewardConfig.model_validate({"functions": [
        "verifier", {"name": "format", "weight": 0.5},
        {"name": "support.custom_reward:calls_made", "weight": 2.0}]})
    model = RewardModel.from_config(config)
    rollout = from_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "done"}])
    score = model.score(_verdict(format_compliance=0.5), rollout=rollout)
    assert score.terms == {"verifier": 0.8, "format": 0.5,
                           "support.custom_reward:calls_made": pytest.approx(-0.2)}
    assert score.total == pytest.approx(0.8 + 0.25 - 0.4)
    lineage = model.lineage()
    assert [t["name"] for t in lineage] == ["verifier", "format", "support.custom_reward:calls_made"]
    assert lineage[0]["version"] == VERSION and lineage[1]["weight"] == 0.5
    assert lineage[2]["version"].startswith("2+") and len(lineage[2]["version"]) == 14


@pytest.mark.parametrize(("name", "message"), [
    ("nonsense", "not a built-in"),
    ("support.nowhere:f", "cannot import"),
    ("support.custom_reward:missing", "has no function"),
    ("support.custom_reward:no_keywords", "keyword arguments scenario, rollout and verdict"),
])
def test_unusable_rewards_are_errors_naming_them(name: str, message: str) -> None:
    with pytest.raises(RewardError, match=message):
        RewardModel.from_config(RewardConfig(functions=[name]))


def test_a_verdict_comes_back_from_a_stored_row() -> None:
    verdict = _verdict(answer=0.5)
    row = {"components": verdict.components, "penalties": verdict.penalties,
           "reward": verdict.reward, "passed": verdict.passed, "verifier_reasons": ["answer"],
           "verifier_version": "1+abc"}
    back = verdict_of_row(row)
    assert back.components == verdict.components and back.reward == 0.8
    assert back.reasons == ["answer"] and back.version == "1+abc"
