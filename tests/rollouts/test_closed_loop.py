"""Closed-loop rollouts against scripted OpenAI-compatible endpoints on 127.0.0.1.

The scripted agent reads the conversation it is sent and plays a fixed policy over every demo
scenario: the perfect one (asks when the request lacks something, then the ground-truth calls
step by step, then an answer stating the facts) passes every scenario; one that always calls a
tool the ground truth does not scores 0, each failure with its reason; a flaky one (perfect on
even trials, wrong on odd) has pass@1 = 1 and pass^2 = 0."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentune.config.llm import BudgetConfig, LLMConfig, RoleConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.rollouts.closed_loop import (
    ClosedLoopScores,
    NativePolicy,
    SimulatedUser,
    TrialSettings,
    rates,
    run_trial,
    scenario_tools,
)

from support.openai_server import OpenAITestServer
from support.scripted_agents import Policy, demo_records, perfect, scripted, wrong_tool


@pytest.fixture(scope="module")
def demo() -> tuple[EnvironmentCatalog, list[ScenarioRecord]]:
    return demo_records()


async def _trials(records: list[ScenarioRecord], catalog: EnvironmentCatalog, base_url: str,
                  trials: int = 1) -> ClosedLoopScores:
    role = RoleConfig(provider="openai", model="scripted", base_url=base_url,
                      api_key_env="SCRIPTED_KEY")
    llm = LLMConfig(student=role, teacher=role, cache=False)
    settings = TrialSettings(trials=trials, temperature=0.0, top_p=None, max_tokens=256,
                             max_steps=6, max_user_turns=1, user_max_chars=160, seed=0)
    scores = ClosedLoopScores()
    async with LLMGateway(llm) as gateway, executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor, gateway=gateway)
        user = SimulatedUser(gateway, settings, "evaluate")
        for record in records:
            tools = scenario_tools(catalog, record.scenario.environment)
            policy = NativePolicy(gateway, "student", tools, settings, "evaluate")
            for trial in range(trials):
                done = await run_trial(record, policy=policy, episode=episode, user=user,
                                       system=None, settings=settings, trial=trial,
                                       group="native", verifier=VerifierConfig())
                scores.rows.append(done.row(record, "scripted"))
    return scores


def test_a_perfect_agent_passes_every_scenario(demo, monkeypatch) -> None:
    catalog, records = demo
    monkeypatch.setenv("SCRIPTED_KEY", "test")
    with OpenAITestServer(scripted(records, catalog, lambda body: perfect)) as server:
        scores = asyncio.run(_trials(records, catalog, server.base_url))
    failed = {r["scenario_id"]: r["reasons"] for r in scores.rows if not r["passed"]}
    assert not failed, failed
    assert rates(scores.rows)["pass@1"] == 1.0
    assert {r["kind"] for r in scores.rows} == {"single_call", "multi_step", "parallel_calls",
                                                "missing_info", "irrelevant", "no_tool"}
    asked = [r for r in scores.rows if r["kind"] == "missing_info"]
    assert all(any(m["role"] == "user" for m in r["messages"][1:]) for r in asked)


def test_an_agent_calling_the_wrong_tool_scores_zero_with_the_reason(demo, monkeypatch) -> None:
    catalog, records = demo
    calling = [r for r in records if r.scenario.calls()]
    monkeypatch.setenv("SCRIPTED_KEY", "test")
    with OpenAITestServer(scripted(calling, catalog, lambda body: wrong_tool)) as server:
        scores = asyncio.run(_trials(calling, catalog, server.base_url))
    assert rates(scores.rows)["pass@1"] == 0.0
    without = [r["scenario_id"] for r in scores.rows if "wrong_tool" not in r["reasons"]]
    assert not without, f"failed without the wrong_tool reason: {without}"


def test_pass_hat_k_counts_a_scenario_only_when_every_trial_passes(demo, monkeypatch) -> None:
    catalog, records = demo
    some = [r for r in records if r.scenario.kind == "single_call"][:4]
    monkeypatch.setenv("SCRIPTED_KEY", "test")

    def flaky(body: dict[str, Any]) -> Policy:
        return perfect if (body.get("seed") or 0) // 1000 % 2 == 0 else wrong_tool

    with OpenAITestServer(scripted(some, catalog, flaky)) as server:
        scores = asyncio.run(_trials(some, catalog, server.base_url, trials=2))
    assert len(scores.rows) == 8
    overall = rates(scores.rows)
    assert (overall["pass@1"], overall["pass^k"]) == (1.0, 0.0), overall
    table = {(r["by"], r["value"]): r for r in scores.table()}
    assert table[("kind", "single_call")]["cases"] == 4


def test_the_driver_keeps_the_runs_engine_and_limits_for_the_model_under_test(
        demo, monkeypatch) -> None:
    """Only the student is replaced: a run on the vLLM engine evaluates on it too."""
    from agentune.tasks.rollouts import driver

    seen: list[LLMConfig] = []

    class Recorder:
        def __init__(self, config: LLMConfig) -> None:
            seen.append(config)

        async def __aenter__(self) -> None:
            raise RuntimeError("recorded")

        async def __aexit__(self, *exc: object) -> None:
            return None

    catalog, records = demo
    student = RoleConfig(provider="openai", model="under-test", base_url="http://127.0.0.1:9",
                         api_key_env="SCRIPTED_KEY")
    llm = LLMConfig(local_engine="vllm", global_concurrency_limit=True, cache=False)
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=64, max_steps=2,
                             max_user_turns=0, user_max_chars=80, seed=0)
    monkeypatch.setattr(driver, "LLMGateway", Recorder)
    with pytest.raises(RuntimeError, match="recorded"):
        asyncio.run(driver.run_closed_loop(
            records[:1], ["native"], lambda *_: None, role=student, llm=llm, catalog=catalog,
            tools=ToolsConfig(), verifier=VerifierConfig(), settings=settings,
            stage="evaluate"))
    assert seen[0].student == student
    assert (seen[0].local_engine, seen[0].global_concurrency_limit) == ("vllm", True)
    assert seen[0].teacher == llm.teacher and seen[0].judge == llm.judge
    assert seen[0].cache is False and seen[0].budget == llm.budget
    # The settings are validated again with the new student: a cost cap needs its prices.
    capped = LLMConfig(cache=False, budget=BudgetConfig(max_cost=1.0))
    with pytest.raises(ValueError, match=r"llm.student \(provider openai, model 'under-test'\)"):
        asyncio.run(driver.run_closed_loop(
            records[:1], ["native"], lambda *_: None, role=student, llm=capped, catalog=catalog,
            tools=ToolsConfig(), verifier=VerifierConfig(), settings=settings,
            stage="evaluate"))
