"""The episode runner: scripted policies acting in demo scenarios, their calls run by the real
tool executor in a fresh session, the user a recording one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.rollouts.episode import (
    Act,
    Counterparts,
    Limits,
    Trajectory,
    VerbatimUser,
    run_episode,
)
from agentune.tasks.verifier.verify import verify

from support.scripted_agents import demo_records


@pytest.fixture(scope="module")
def demo() -> tuple[EnvironmentCatalog, dict[str, ScenarioRecord]]:
    catalog, records = demo_records()
    return catalog, {r.scenario.id: r for r in records}


class Turns:
    """A policy playing fixed acts, recording what it was shown each turn."""

    def __init__(self, *acts: Act | Callable[[Trajectory], Act]) -> None:
        self.acts = list(acts)
        self.seen: list[tuple[int, int]] = []  # (messages shown, seed)

    async def act(self, trajectory: Trajectory, seed: int) -> Act:
        self.seen.append((len(trajectory.messages), seed))
        act = self.acts.pop(0)
        return act(trajectory) if callable(act) else act


class Asked:
    """A user who records the questions and answers each with a numbered reply."""

    def __init__(self) -> None:
        self.questions: list[str] = []

    async def reply(self, record: ScenarioRecord, question: str) -> str:
        self.questions.append(question)
        return f"reply {len(self.questions)}"


def _run(catalog: EnvironmentCatalog, record: ScenarioRecord, policy: Any, user: Any = None, *,
         max_steps: int = 6, max_user_turns: int = 1, system: str | None = None,
         verified: bool = False) -> tuple[Trajectory, Any]:
    async def go() -> tuple[Trajectory, Any]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            trajectory = Trajectory.opening(record.scenario.request, system)
            await run_episode(trajectory, policy,
                              Counterparts.of(record, episode, user or VerbatimUser()),
                              limits=Limits(max_steps, max_user_turns), seed=100)
            verdict = await verify(record.scenario, record.expected_state, trajectory.rollout(),
                                   episode, VerifierConfig(), initial_state=record.start_state,
                                   now=record.now) if verified else None
            return trajectory, verdict

    return asyncio.run(go())


def _truth(record: ScenarioRecord, step: int, encode: bool = True) -> tuple[tuple[str, Any], ...]:
    return tuple((c.name, json.dumps(dict(c.arguments)) if encode else dict(c.arguments))
                 for c in record.scenario.ground_truth[step])


def test_calls_run_in_the_session_and_their_results_come_back_by_id(demo) -> None:
    catalog, records = demo
    record = records["trv-flight-and-train"]
    policy = Turns(Act("both at once", _truth(record, 0)), Act("Flights and trains listed."))
    trajectory, verdict = _run(catalog, record, policy, system="be brief", verified=True)
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    call = trajectory.messages[2]
    assert [c["id"] for c in call["tool_calls"]] == ["call_0_0", "call_0_1"]
    assert [m["tool_call_id"] for m in trajectory.messages[3:5]] == ["call_0_0", "call_0_1"]
    assert {cid: o.tool for cid, o in trajectory.observations.items()} == {
        "call_0_0": "search_flights", "call_0_1": "search_trains"}
    assert all(o.ok for o in trajectory.observations.values())
    assert trajectory.messages[3]["content"] == trajectory.observations["call_0_0"].content
    assert trajectory.answered and trajectory.answer() == "Flights and trains listed."
    assert policy.seen == [(2, 100), (5, 101)]  # each turn sees all so far; seed + turn
    assert verdict.components["state"] == 1.0 and "wrong_tool" not in verdict.reasons


def test_one_call_has_the_turns_id_and_arguments_stay_as_the_policy_wrote_them(demo) -> None:
    catalog, records = demo
    record = records["trv-flights-bj-sh"]
    policy = Turns(Act("", _truth(record, 0, encode=False)), Act("Done."))
    trajectory, _ = _run(catalog, record, policy)
    call = trajectory.messages[1]["tool_calls"][0]
    assert call["id"] == "call_0" and isinstance(call["function"]["arguments"], dict)
    assert trajectory.observations["call_0"].ok


def test_text_before_any_call_is_a_question_where_the_user_knows_more(demo) -> None:
    catalog, records = demo
    record = records["trv-missing-flight"]
    user = Asked()
    policy = Turns(Act("Which date?"), Act("And the time?"), Act("Booked."))
    trajectory, _ = _run(catalog, record, policy, user, max_user_turns=1)
    # One question by the rule (max_user_turns = 1); the next text is the answer.
    assert user.questions == ["Which date?"]
    assert [m["role"] for m in trajectory.messages] == [
        "user", "assistant", "user", "assistant"]
    assert trajectory.messages[2]["content"] == "reply 1"
    assert trajectory.questions == 1 and trajectory.answer() == "And the time?"
    assert trajectory.turns == [0, 1]


def test_after_a_call_text_is_the_answer_and_a_policy_may_say_which_it_is(demo) -> None:
    catalog, records = demo
    hidden = records["trv-missing-flight"]
    user = Asked()
    # Explicit: a question after acting, then the answer even though questions are left.
    policy = Turns(Act("", (("search_flights", '{"origin": "北京", "destination": "上海", '
                                               '"date": "2025-06-05"}'),)),
                   Act("Morning or evening?", question=True), Act("Booked.", question=False))
    trajectory, _ = _run(catalog, hidden, policy, user, max_user_turns=3)
    assert user.questions == ["Morning or evening?"]
    assert trajectory.answer() == "Booked." and trajectory.questions == 1
    # Where the user knows nothing more, text is the answer at once.
    plain = records["trv-no-tool-packing"]
    trajectory, _ = _run(catalog, plain, Turns(Act("Pack light.")), Asked())
    assert trajectory.answer() == "Pack light." and trajectory.questions == 0


def test_an_ask_user_call_is_answered_by_the_user_as_its_tool_result(demo) -> None:
    catalog, records = demo
    user = Asked()
    policy = Turns(Act("", (("ask_user", '{"question": "Which day?"}'),)), Act("Booked."))
    trajectory, _ = _run(catalog, records["trv-missing-flight"], policy, user)
    assert user.questions == ["Which day?"]
    assert trajectory.messages[2] == {"role": "tool", "tool_call_id": "call_0",
                                      "name": "ask_user", "content": "reply 1"}
    assert "call_0" not in trajectory.observations  # a person answered, no tool ran
    # A user stating what they know: the scenario's hidden information, verbatim.
    record = records["trv-missing-flight"]
    trajectory, _ = _run(catalog, record, Turns(Act("", (("ask_user", "{}"),)), Act("Ok.")))
    assert trajectory.messages[2]["content"] == record.scenario.hidden


def test_bad_arguments_are_an_observed_error_not_a_stop(demo) -> None:
    catalog, records = demo
    policy = Turns(Act("", (("search_flights", "{not json"), ("no_such_tool", "{}"))),
                   Act("Sorry."))
    trajectory, _ = _run(catalog, records["trv-flights-bj-sh"], policy)
    errors = {o.tool: o.error_kind for o in trajectory.observations.values()}
    assert errors == {"search_flights": "invalid_arguments", "no_such_tool": "unknown_tool"}
    assert trajectory.answered


def test_an_episode_ends_unanswered_at_the_cap_or_when_the_model_cannot_be_asked(demo) -> None:
    catalog, records = demo
    record = records["trv-flights-bj-sh"]
    calls = Turns(*[Act("", (("list_bookings", "{}"),))] * 3)
    trajectory, _ = _run(catalog, record, calls, max_steps=3)
    assert not trajectory.answered and trajectory.answer() is None
    assert trajectory.rollout().truncated and trajectory.calls() == 3
    trajectory, _ = _run(catalog, record, Turns(Act(error="HTTP 503")))
    assert trajectory.error == "HTTP 503" and not trajectory.answered
    assert [m["role"] for m in trajectory.messages] == ["user"]


def test_a_policy_that_stops_by_raising_leaves_what_was_done_readable(demo) -> None:
    catalog, records = demo
    record = records["trv-book-cheapest-flight"]

    def refuse(trajectory: Trajectory) -> Act:
        raise RuntimeError("gate")

    policy = Turns(Act("", _truth(record, 0)), refuse)
    trajectory = Trajectory.opening(record.scenario.request)

    async def go() -> None:
        async with executor_for(catalog, ToolsConfig()) as executor:
            await run_episode(trajectory, policy,
                              Counterparts.of(record, Episode(catalog, executor), VerbatimUser()),
                              limits=Limits(4, 1))

    with pytest.raises(RuntimeError, match="gate"):
        asyncio.run(go())
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "tool"]
    assert trajectory.observations["call_0"].ok and trajectory.turns == [0]
