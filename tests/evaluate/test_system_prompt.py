"""One system prompt: a scenario's SFT row (synthesize's trajectories row, framed as configured)
and a closed-loop trial of the same scenario (evaluate, messages form, the react group) open with
the same system message and request; they differ only in the conversation after it. With the old
framing (``system_prompt: template``) they differed in the system message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentune.config.synthesize import SynthesisConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import case_policy
from agentune.tasks.evaluate.prompt_templates import PromptTemplate
from agentune.tasks.llm.types import ChatRequest, ChatResult, Role
from agentune.tasks.rollouts.closed_loop import (
    SimulatedUser,
    TrialSettings,
    run_trial,
    scenario_tools,
)
from agentune.tasks.rollouts.episode import Trajectory
from agentune.tasks.synthesize.agent_loop import TrajectoryOutcome
from agentune.tasks.synthesize.sampling import ScenarioOffer, scenario_combinations
from agentune.tasks.synthesize.trajectory_forms import RowFraming, trajectory_row
from agentune.tasks.tools.observation import Observation
from agentune.tasks.verifier.rollout import ask_user_tool

from support.scripted_agents import demo_records

SCENARIO = "trv-flights-bj-sh"


class AnsweringGateway:
    """The model under test: answers every turn with a fixed text."""

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult:
        return ChatResult(content="MU5101 is the cheapest.")


@pytest.fixture(scope="module")
def demo():
    return demo_records("train")


def sft_row(demo, framing: RowFraming, template: str = "autogpt") -> dict[str, Any]:
    """The row synthesis writes for the scenario's trajectory under ``template``."""
    catalog, records = demo
    record = next(r for r in records if r.scenario.id == SCENARIO)
    ask = ask_user_tool()
    tools = {**{t.name: t for t in catalog.training_tools()}, ask.name: ask}
    offer = ScenarioOffer({record.scenario.environment: (*(
        t.name for t in catalog.offered_tools(record.scenario.environment)), ask.name)},
        frozenset(t.name for s in catalog.environments.values() if s.shared for t in s.tools),
        3, tools)
    synthesized_in = benchmark_template(template)
    combo, = scenario_combinations([record], {synthesized_in.id: synthesized_in}, offer,
                                   SynthesisConfig(templates_per_scenario=1), seed=0)
    shown = framing.tools(tools, combo.lang)
    call = record.scenario.ground_truth[0][0]
    trajectory = Trajectory.opening(combo.query)
    trajectory.messages += [
        {"role": "assistant", "content": "Search the flights.", "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": call.name, "arguments": dict(call.arguments)}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": call.name, "content": "[...]"}]
    trajectory.observations["call_0"] = Observation(tool=call.name, kind=None, ok=True,
                                                    content="[...]", elapsed_s=0.0)
    outcome = TrajectoryOutcome(
        combo, synthesized_in, accepted=True, system="You are TaskPilot, an autonomous agent.",
        trajectory=trajectory, final_answer="最便宜的是 MU5101。")
    return trajectory_row(outcome, shown, "teacher",
                          framing.system(outcome, shown, record.now))


def closed_loop_trial(demo) -> list[dict[str, Any]]:
    """The messages of a closed-loop trial of the scenario, react group, messages form."""
    catalog, records = demo
    record = next(r for r in records if r.scenario.id == SCENARIO)
    settings = TrialSettings(trials=1, temperature=0.0, top_p=None, max_tokens=256, max_steps=2,
                             max_user_turns=1, user_max_chars=160, seed=0)
    group = PromptTemplate("react", benchmark_template("react"), seen=True)
    tools = scenario_tools(catalog, record.scenario.environment)
    gateway = AnsweringGateway()

    async def trial() -> list[dict[str, Any]]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            policy, system = case_policy("messages", gateway, group, tools, record, settings)
            done = await run_trial(record, policy=policy, episode=Episode(catalog, executor),
                                   user=SimulatedUser(gateway, settings, "evaluate"),
                                   system=system, settings=settings, trial=0, group=group.key,
                                   verifier=VerifierConfig())
        return done.messages

    return asyncio.run(trial())


def test_an_sft_row_and_a_closed_loop_trial_differ_only_in_the_conversation(demo) -> None:
    framing = RowFraming.from_config(SynthesisConfig())
    row = sft_row(demo, framing)["messages"]
    trial = closed_loop_trial(demo)
    assert row[0]["role"] == "system" and row[:2] == trial[:2]
    assert row[0]["content"].startswith("你是一名细心的助手")  # react's Profile, in Chinese
    assert "当前时间：2025-06-02" in row[0]["content"]
    assert row[2:] != trial[2:]  # the conversations themselves


def test_the_old_framing_trained_under_another_system_message(demo) -> None:
    row = sft_row(demo, RowFraming(system_prompt="template"))["messages"]
    assert row[0] == {"role": "system", "content": "You are TaskPilot, an autonomous agent."}
    assert row[0] != closed_loop_trial(demo)[0]


def test_the_row_tools_are_described_in_the_requests_language(demo) -> None:
    row = sft_row(demo, RowFraming.from_config(SynthesisConfig()))
    descriptions = [t["function"]["description"] for t in row["tools"]]
    assert descriptions and all(not d.isascii() for d in descriptions)  # zh request
    assert not any("Search flights" in d for d in descriptions)


def test_the_closed_loop_offers_the_tools_as_the_rows_describe_them(demo) -> None:
    """Tools in the request's language in the closed loop too: the chat template shows them to
    the model, so a row's tool schemas and the trial's must be the same text."""
    from agentune.tasks.evaluate.benchmarks.closed_loop.benchmark import OfferedTools
    from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval

    catalog, records = demo
    record = next(r for r in records if r.scenario.id == SCENARIO)
    row_tools = {t["function"]["name"]: t for t in
                 sft_row(demo, RowFraming.from_config(SynthesisConfig()))["tools"]}
    offered = OfferedTools(catalog, None, CandidateRetrieval(),
                           in_request_language=True)(record.scenario)
    both = [t for t in offered if t["function"]["name"] in row_tools]
    assert len(both) >= 2 and all(t == row_tools[t["function"]["name"]] for t in both)
    as_written = OfferedTools(catalog, None, CandidateRetrieval())(record.scenario)
    assert [t["function"]["name"] for t in as_written] == [t["function"]["name"] for t in offered]
    assert as_written != offered  # the catalog's bilingual descriptions
