"""The verifier on planted trajectories: rule-made variations of every demo scenario's ground
truth (tests/support/planted.py), each labelled pass or fail by construction.

The verifier must agree with the labels on at least 98% of them, and every disagreement must be
one this test explains (``EXPLAINED``); a new one fails the test with its reasons and details."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import Call, Scenario, load_scenarios
from agentune.tasks.verifier.answers import answer_defect
from agentune.tasks.verifier.rollout import from_messages, from_steps
from agentune.tasks.verifier.verify import Verdict, call_f1, verify

from support.planted import Planted, conversation, plant

DEMO = PROJECT_ROOT / "data" / "demo"
EXPLAINED: dict[str, str] = {
    "cal-rooms-10/wrong_argument": "min_capacity 11 instead of 10 returns the same two rooms "
    "(B201 seats 12, B202 seats 20): the answer is right and grounded in what the call returned; "
    "only tool_accuracy (0) shows the other argument",
    "cal-free-rooms/wrong_argument": "the date moved to 2025-06-06, when the same rooms are free: "
    "the answer (B201, B202) is right for the request and was returned by the call; only "
    "tool_accuracy (0) shows the other argument",
}
"""Planted id -> why the verifier rightly disagrees with the rule's label."""


@pytest.fixture(scope="module")
def demo() -> tuple[EnvironmentCatalog, list[Scenario]]:
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    return catalog, load_scenarios(DEMO / "scenarios.yaml", catalog)


async def _verdicts(catalog: EnvironmentCatalog, planted: list[Planted]
                    ) -> list[tuple[Planted, Verdict]]:
    async with executor_for(catalog, ToolsConfig()) as executor:
        episode = Episode(catalog, executor)
        expected = {}
        for p in planted:
            if p.scenario.id not in expected:
                expected[p.scenario.id] = await execute_ground_truth(p.scenario, episode)
        out = []
        for p in planted:
            run = expected[p.scenario.id]
            out.append((p, await verify(p.scenario, run.expected_state, from_messages(p.messages),
                                        episode, VerifierConfig(),
                                        initial_state=run.initial_state)))
        return out


def planted_set(catalog: EnvironmentCatalog, scenarios: list[Scenario]) -> list[Planted]:
    return [p for s in scenarios
            for p in plant(s, [t.name for t in catalog.offered_tools(s.environment)])]


def test_planted_trajectories_agree_with_their_labels(demo) -> None:
    catalog, scenarios = demo
    planted = planted_set(catalog, scenarios)
    assert len(planted) >= 200
    verdicts = asyncio.run(_verdicts(catalog, planted))
    disagree = {p.id: v for p, v in verdicts if v.passed != p.passes}
    unexplained = {k: (v.reasons, v.details) for k, v in disagree.items() if k not in EXPLAINED}
    agreement = 1 - len(disagree) / len(planted)
    assert agreement >= 0.98 and not unexplained, (agreement, unexplained)
    # An explained disagreement is a passed outcome reached with other arguments than planned.
    assert all(v.passed and v.components["tool_accuracy"] < 1 for v in disagree.values())
    by_variant = Counter((p.variant, p.passes) for p in planted)
    assert by_variant[("right", True)] >= 55 and by_variant[("reordered", True)] >= 5
    # Each failure shows up under the reason its variation plants.
    reasons = {p.id: set(v.reasons) for p, v in verdicts}
    for p, _ in verdicts:
        expected = {"redundant_call": "redundant_call", "unneeded_call": "timing",
                    "missing_fact": "answer", "unknown_tool": "format",
                    "act_without_asking": "timing", "asks_needlessly": "timing"}.get(p.variant)
        if expected:
            assert expected in reasons[p.id], (p.id, reasons[p.id])


def _scenario(demo, scenario_id: str) -> Scenario:
    return next(s for s in demo[1] if s.id == scenario_id)


def _verify(catalog: EnvironmentCatalog, scenario: Scenario, rollout: Any) -> Verdict:
    async def run() -> Verdict:
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            gt = await execute_ground_truth(scenario, episode)
            return await verify(scenario, gt.expected_state, rollout, episode, VerifierConfig(),
                                initial_state=gt.initial_state)
    return asyncio.run(run())


def test_components_reward_and_reasons_of_a_right_and_a_wrong_booking(demo) -> None:
    catalog = demo[0]
    scenario = _scenario(demo, "trv-book-cheapest-flight")
    right = _verify(catalog, scenario, from_messages(conversation(
        scenario, [list(s) for s in scenario.ground_truth], "已订好 MU5102，票价 960 元。")))
    assert right.passed and right.reward == pytest.approx(1.0)
    assert all(v == 1.0 for v in right.components.values())
    # The dearer flight: booked fine, but the state is wrong (the answer's facts were returned by
    # the search, so they are grounded: the end state is what tells).
    wrong = _verify(catalog, scenario, from_messages(conversation(scenario, [
        list(scenario.ground_truth[0]), [Call(name="book_flight",
                                              arguments={"flight_id": "CA1501", "passenger": "张伟"})]],
        "已订好 MU5102，票价 960 元。")))
    assert not wrong.passed and wrong.reasons == ["state"]
    assert wrong.components["state"] == 0.0 and wrong.components["tool_accuracy"] == 0.5
    assert wrong.reward < right.reward
    assert any("bookings" in d for d in wrong.details)


def test_penalties_lower_the_reward_by_their_weights(demo) -> None:
    catalog = demo[0]
    scenario = _scenario(demo, "cal-events-jun3")
    steps = [list(s) for s in scenario.ground_truth]
    base = _verify(catalog, scenario, from_messages(conversation(scenario, steps, "周会, Design review")))
    repeated = _verify(catalog, scenario, from_messages(conversation(
        scenario, steps + steps, "周会, Design review")))
    assert repeated.penalties["redundant_call"] and not base.penalties["redundant_call"]
    weights = VerifierConfig().weights.model_dump()
    component_loss = sum(w * (base.components[k] - repeated.components[k])
                         for k, w in weights.items())
    assert repeated.components["tool_accuracy"] == pytest.approx(2 / 3)
    assert base.reward - repeated.reward == pytest.approx(0.2 + component_loss)
    truncated = _verify(catalog, scenario, from_messages(
        conversation(scenario, steps, None), truncated=True))
    assert truncated.penalties["timeout"] and "timeout" in truncated.reasons


def test_template_steps_are_verified_like_messages(demo) -> None:
    catalog = demo[0]
    scenario = _scenario(demo, "shop-tracking")
    steps = [{"step": 0, "kind": "plan", "prompt": "...", "completion":
              'Thought: look it up\nAction: get_order\nAction Input: O-1001'},
             {"step": 1, "kind": "plan", "prompt": "...",
              "completion": "Final Answer: 物流单号 SF123456789"}]
    tools = [t.to_openai() for t in catalog.offered_tools(scenario.environment)]
    verdict = _verify(catalog, scenario, from_steps(steps, "react", tools=tools))
    assert verdict.passed, verdict.details
    garbled = [dict(steps[0], completion="I would look it up."), steps[1]]
    verdict = _verify(catalog, scenario, from_steps(garbled, "react", tools=tools))
    assert not verdict.passed and "format" in verdict.reasons


def test_call_f1_counts_arguments_and_defaults(demo) -> None:
    tools = {t.name: t for t in demo[0].offered_tools("calendar")}
    a = Call(name="list_rooms", arguments={})
    explicit_default = Call(name="list_rooms", arguments={"min_capacity": 1})
    other = Call(name="list_rooms", arguments={"min_capacity": 9})
    assert call_f1([explicit_default], [a], tools) == 1.0
    assert call_f1([other], [a], tools) == 0.0
    assert call_f1([a, other], [a], tools) == pytest.approx(2 / 3)
    assert call_f1([], [], tools) == 1.0


def iter_kinds(scenarios: list[Scenario]) -> Iterator[str]:
    yield from sorted({s.kind for s in scenarios})


def test_every_kind_and_language_is_planted(demo) -> None:
    catalog, scenarios = demo
    planted = planted_set(catalog, scenarios)
    assert {p.scenario.kind for p in planted} == set(iter_kinds(scenarios)) == {
        "single_call", "parallel_calls", "multi_step", "no_tool", "irrelevant", "missing_info"}
    assert {p.scenario.lang for p in planted} == {"zh", "en"}


@pytest.mark.parametrize(("answer", "defect"), [
    ("好的。请问还有什么可以帮忙的吗？}。}。请问还有什么可以帮忙的吗？}。请问还有什么可以帮忙的吗？",
     "repeats itself"),
    ("1. 1.1.1.1: 1.1.1.1.1: 1.1.1.1.1: 1.1.1.1.1: 1.1.1.1.1: 1.1.1.1.1: 1.1.1.1.1:",
     "repeats itself"),
    ("你可以带上感良感良感良感良感良感良感良", "repeats itself"),
    ("没有发货，可以取消。。。。。。。。。。", "runs on in punctuation"),
    ('{"name": "ask_user", "arguments": {"question": "要带几天的衣服？"}}', "writes a tool call"),
    ('```\n{"type": "function", "function": {"name": "car_parking"}}\n```', "writes a tool call"),
    ("已取消订单。<|endofthink|>", "carries prompt markup"),
    ("# Tools\n\nYou may call one or more functions", "carries prompt markup"),
    ("出差去上海三天，行李一般要带哪些东西？", "only restates the request"),
    ("出差去上海三天，行李一般要带", "only restates the request"),  # most of it, cut out
])
def test_text_that_is_no_answer_is_named(answer: str, defect: str) -> None:
    found = answer_defect(answer, "出差去上海三天，行李一般要带哪些东西？")
    assert found is not None and found.startswith(defect), found


@pytest.mark.parametrize("answer", [
    "带三套换洗衣服、充电器和雨伞；会议用的电脑和名片别忘了。",
    "The meeting rooms that seat 10 or more are H701, E402, J803 and K904.",
    "Orders O-1749 and O-1746 come to 3,232 yuan; 1000000 is written without separators here.",
    "| room | seats |\n|---|---|\n| A101 | 6 |\n| B201 | 12 |",
    "1. **Agenda**: send it a day ahead.\n2. **Timebox**: 10 minutes a topic.\n"
    "3. **Owner**: one per action item.",
    "抱歉，我没有叫车的工具，无法帮你叫出租车。",
    "上海",  # a word of the request is not an echo of it
    "- Room A: $120.00 per night\n- Room B: $150.00 per night\n- Room C: $99.00 per night",
    "Order O-1001\nStatus: shipped\nOrder O-1002\nStatus: shipped\nOrder O-1003\n"
    "Status: shipped",  # a line under each item of a list is no loop
])
def test_an_answer_is_not_flagged(answer: str) -> None:
    assert answer_defect(answer, "出差去上海三天，行李一般要带哪些东西？") is None


def test_no_tool_and_irrelevant_need_an_answer_not_just_text_without_a_call(demo) -> None:
    catalog = demo[0]
    packing = _scenario(demo, "trv-no-tool-packing")
    taxi = _scenario(demo, "trv-irrelevant-taxi")
    said = _verify(catalog, packing, from_messages(conversation(
        packing, [], "带三套换洗衣服、充电器和雨伞。")))
    assert said.passed
    looped = _verify(catalog, packing, from_messages(conversation(
        packing, [], "带三套换洗衣服。带三套换洗衣服。带三套换洗衣服。")))
    assert not looped.passed and looped.reasons == ["answer"]
    assert any("repeats itself" in d for d in looped.details)
    declined = _verify(catalog, taxi, from_messages(conversation(
        taxi, [], "抱歉，我没有叫车的工具。")))
    assert declined.passed
    written = _verify(catalog, taxi, from_messages(conversation(
        taxi, [], '{"name": "call_taxi", "arguments": {"to": "机场"}}')))
    assert not written.passed and written.reasons == ["answer"]
