"""The tools a scenario is offered: its environment's, the ones its ground truth calls, ask_user,
and at most ``distractor_tools`` other shared tools, the ones the retriever ranks highest for its
request; every shared tool with ``distractor_tools: null`` (as before); in catalog order."""

from __future__ import annotations

import datetime as dt

from agentune.config.synthesize import SynthesisConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.environments.scenarios import Call, Scenario, ScenarioRecord
from agentune.tasks.synthesize.sampling import ScenarioOffer, SynthesisInputs, plan_synthesis
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.verifier.rollout import ask_user_tool

CATALOG = {t.name: t for t in load_tool_catalog(PROJECT_ROOT / "data" / "demo" / "tools.yaml")}
ASK = ask_user_tool()
TOOLS = {**CATALOG, ASK.name: ASK}
OWN = ("web_search", "read_webpage", "encyclopedia_lookup")
SHARED = ("calculator", "date_calculate", "get_current_datetime", "unit_convert")
OFFERED = {"knowledge": (*OWN, *SHARED, ASK.name)}


def scenario(request: str, *calls: str, sid: str = "s1") -> Scenario:
    return Scenario(id=sid, environment="knowledge", lang="en", kind="single_call",
                    request=request, facts=["x"],
                    ground_truth=[[Call(name=name, arguments={}) for name in calls]] if calls
                    else [])


def offer(distractors: int | None) -> ScenarioOffer:
    return ScenarioOffer(OFFERED, frozenset(SHARED), distractors, TOOLS)


def test_null_offers_every_shared_tool_as_before() -> None:
    assert offer(None)(scenario("Convert 3 miles to km.")) == OFFERED["knowledge"]


def test_distractors_are_the_shared_tools_ranked_highest_for_the_request() -> None:
    request = "Convert 3 miles to km: a unit conversion of length."
    assert offer(1)(scenario(request)) == (*OWN, "unit_convert", ASK.name)
    two = offer(2)(scenario(request))
    assert len(two) == len(OWN) + 3 and "unit_convert" in two and two[-1] == ASK.name


def test_a_shared_tool_the_ground_truth_calls_is_offered_beside_the_distractors() -> None:
    needed = scenario("What is 17 * 23? Convert the result from km to miles.", "calculator")
    assert offer(0)(needed) == (*OWN, "calculator", ASK.name)
    with_one = offer(1)(needed)
    assert with_one == (*OWN, "calculator", "unit_convert", ASK.name)


def test_the_plan_offers_the_compact_set_by_default() -> None:
    now = dt.datetime(2025, 6, 2, 9, 30, tzinfo=dt.UTC)
    records = [ScenarioRecord(scenario("Look up Mount Everest.", "encyclopedia_lookup",
                                       sid=f"s{i}"), "train", now, {}, {}) for i in range(3)]
    react = benchmark_template("react")
    inputs = SynthesisInputs([], {}, {react.id: react}, scenarios=records, scenario_tools=TOOLS,
                             offered=OFFERED, shared=frozenset(SHARED))
    default = plan_synthesis(inputs, SynthesisConfig(templates_per_scenario=1), seed=0)
    assert SynthesisConfig().distractor_tools == 3
    assert all(len(c.tool_names) == len(OWN) + 3 + 1 for c in default)
    everything = plan_synthesis(inputs, SynthesisConfig(templates_per_scenario=1,
                                                        distractor_tools=None), seed=0)
    assert all(c.tool_names == OFFERED["knowledge"] for c in everything)


def test_from_the_session_the_environments_own_tools_are_distractors_too() -> None:
    session = ScenarioOffer(OFFERED, frozenset(SHARED), 2, TOOLS, from_session=True)
    needed = scenario("Look up Mount Everest in the encyclopedia.", "encyclopedia_lookup")
    tools = session(needed)
    assert "encyclopedia_lookup" in tools and tools[-1] == ASK.name
    assert len(tools) == 1 + 2 + 1  # the needed tool, two distractors, ask_user
    assert [t for t in OFFERED["knowledge"] if t in tools] == list(tools)  # catalog order
    nothing_needed = session(scenario("Tell me a joke."))
    assert len(nothing_needed) == 2 + 1 and nothing_needed[-1] == ASK.name
