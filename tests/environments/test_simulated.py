"""Simulated environments: the teacher plays the tools with memory of the session, so an id one
call returns is known to the next; deterministic through the response cache."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.tools import SimulationConfig, ToolsConfig
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.environments.scenarios import Call, Scenario
from agentune.tasks.llm.gateway import LLMGateway

from support.openai_server import OpenAITestServer, Reply

KEY_ENV = "AGENTUNE_TEST_SIM_KEY"
CATALOG = """
environments:
  - name: desk
    description: {en: "A booking desk."}
    simulated:
      tools: [search_slots, book_slot]
      state: {slots: [{slot_id: S-1, time: "10:00"}], booked: []}
      output_schemas:
        book_slot: {type: object, properties: {booking_id: {type: string}}, required: [booking_id]}
tools:
  - type: function
    function:
      name: search_slots
      description: Find free slots.
      parameters: {type: object, properties: {day: {type: string}}, required: [day]}
  - type: function
    function:
      name: book_slot
      description: Book a slot found with search_slots.
      parameters: {type: object, properties: {slot_id: {type: string}}, required: [slot_id]}
"""


def desk_api(body: dict[str, Any], n: int) -> Reply:
    """A teacher that plays the desk: the search returns a new slot id, the booking succeeds
    only for an id that an earlier call in the session returned."""
    user = body["messages"][1]["content"]
    name = user.split("API function: ", 1)[1].split("\n", 1)[0]
    arguments = json.loads(user.split("Call arguments:\n", 1)[1].split("\n\n", 1)[0])
    if name == "search_slots":
        answer = {"response": {"slots": [{"slot_id": "S-77", "time": "15:00"}]}, "state": {}}
    elif "Earlier calls in this session" in user and arguments["slot_id"] in \
            user.split("Earlier calls in this session", 1)[1].split("Call arguments:", 1)[0]:
        answer = {"response": {"booking_id": "B-1"}, "state": {"booked": ["S-77"]}}
    else:
        answer = {"response": {}, "state": {}, "error": "unknown slot"}
    return Reply(json.dumps(answer))


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-0000")


def _episode_calls(tmp_path: Path, server: OpenAITestServer, calls: list[Call]
                   ) -> tuple[list[Any], dict[str, Any]]:
    path = tmp_path / "tools.yaml"
    path.write_text(CATALOG, encoding="utf-8")
    catalog = load_environments(path)
    teacher = RoleConfig(provider="openai", model="teacher", base_url=server.base_url,
                         api_key_env=KEY_ENV, max_retries=0)
    scenario = Scenario(id="s", environment="desk", lang="en", kind="multi_step",
                        request="Book a slot.", ground_truth=[[c] for c in calls])

    async def run() -> tuple[list[Any], dict[str, Any]]:
        async with LLMGateway(LLMConfig(teacher=teacher, cache_dir=str(tmp_path / "cache"))) \
                as gateway, executor_for(catalog, ToolsConfig(), gateway=gateway) as executor:
            episode = Episode(catalog, executor, gateway=gateway, simulation=SimulationConfig())
            session = episode.open(scenario)
            observations = [(await episode.run_step([c], session))[0] for c in calls]
            return observations, session.state()

    return asyncio.run(run())


def test_an_id_from_one_call_is_known_to_the_next(tmp_path: Path, openai_server) -> None:
    server = openai_server(desk_api)
    observations, state = _episode_calls(tmp_path, server, [
        Call(name="search_slots", arguments={"day": "2025-06-03"}),
        Call(name="book_slot", arguments={"slot_id": "S-77"})])
    assert all(o.ok for o in observations), observations
    assert json.loads(observations[1].content) == {"booking_id": "B-1"}
    assert state == {"desk": {"slots": [{"slot_id": "S-1", "time": "10:00"}],
                              "booked": ["S-77"]}}
    second = server.requests[1].body["messages"][1]["content"]
    history = second.split("Earlier calls in this session", 1)[1]
    assert "search_slots" in history and "S-77" in history
    world = second.split("The service's data before this call (JSON):", 1)[1]
    assert "S-1" in world.split("Earlier calls", 1)[0]
    assert "book_slot" in second and "booking_id" in second  # the output schema is shown


def test_without_the_earlier_call_the_id_is_unknown(tmp_path: Path, openai_server) -> None:
    server = openai_server(desk_api)
    observations, state = _episode_calls(tmp_path, server, [
        Call(name="book_slot", arguments={"slot_id": "S-77"})])
    assert not observations[0].ok and "unknown slot" in observations[0].content
    assert state["desk"]["booked"] == []


def test_a_replayed_session_is_answered_from_the_cache(tmp_path: Path, openai_server) -> None:
    server = openai_server(desk_api)
    calls = [Call(name="search_slots", arguments={"day": "2025-06-03"}),
             Call(name="book_slot", arguments={"slot_id": "S-77"})]
    first = _episode_calls(tmp_path, server, calls)
    asked = len(server.requests)
    again = _episode_calls(tmp_path, server, calls)
    assert len(server.requests) == asked == 2
    assert [o.content for o in first[0]] == [o.content for o in again[0]]
    assert first[1] == again[1]


def test_an_answer_outside_the_output_schema_is_a_simulator_failure(tmp_path: Path,
                                                                     openai_server) -> None:
    server = openai_server([Reply(json.dumps({"response": {"id": 3}, "state": {}}))])
    observations, _ = _episode_calls(tmp_path, server, [
        Call(name="book_slot", arguments={"slot_id": "S-1"})])
    assert observations[0].error_kind == "simulator_failure"
    assert "output schema" in observations[0].content
