"""Scenario synthesis against a scripted OpenAI-compatible teacher: parallel calls end to end in
every agent format, a question to the user that makes a multi-turn trajectory, a tool call where
none was needed rejected for its timing, k attempts that stop at the first pass or run all, and
guided attempts whose grammar admits only the ground truth's next tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.environments.catalog import load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord, load_scenarios
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.synthesize.agent_loop import (
    ToolCallRecord,
    Verification,
    guided_choices,
    guided_step_floor,
)
from agentune.tasks.synthesize.checkpoint import SynthesisCheckpoint
from agentune.tasks.synthesize.sampling import scenario_combinations
from agentune.tasks.synthesize.stage import (
    SynthesisResult,
    assemble_synthesis,
    synthesize_trajectories,
)
from agentune.tasks.synthesize.trajectory_forms import RowFraming
from agentune.tasks.tools.observation import Observation
from agentune.tasks.verifier.rollout import ASK_USER, ask_user_tool, from_steps
from agentune.tasks.verifier.verify import verify

from support.openai_server import Fail, OpenAITestServer, Reply
from support.scripted_agents import finish_json, step_json

DEMO = PROJECT_ROOT / "data" / "demo"
TEMPLATES = ("react", "autogpt", "toolllama", "modelscope", "kuaiagent")

# Per scenario: the steps a right agent takes ([calls] or an answer), and the final answer.
SCRIPTS: dict[str, list[Any]] = {
    "trv-flight-and-train": [[("search_flights", {"origin": "北京", "destination": "上海",
                                                  "departure_date": "2025-06-06"}),
                              ("search_trains", {"origin": "北京", "destination": "上海",
                                                 "date": "2025-06-06"})],
                             "最便宜的航班是 MU5102，高铁有 G1。"],
    "cal-missing-one-on-one": [[(ASK_USER, {"question": "会议的时间、时长、标题和参会人是？"})],
                               [("calendar_create_event", {
                                   "title": "一对一", "date": "2025-06-05", "start": "10:00",
                                   "duration_minutes": 30, "attendees": ["王芳"]})],
                               "已约好 6月5日 10:00 的一对一。"],
    "trv-no-tool-packing": [[("list_bookings", {})], "带上身份证、充电器和换洗衣物。"],
    "shop-tracking": [[("get_order", {"order_id": "O-1001"})], "物流单号是 SF123456789。"],
}


class ScriptedAgent:
    """Plays the teacher from SCRIPTS: the planner's next step in the template's JSON (the
    neutral one for text formats), the concluder, and the simulated user. ``wrong_first``: the
    first attempt (temperature 0) of shop-tracking asks for the wrong order.

    Combinations run one at a time (concurrency 1), so the step of a planning request is the
    number of planning requests made before it for the same scenario, format and attempt."""

    def __init__(self, wrong_first: bool = False) -> None:
        self.wrong_first = wrong_first
        self.steps: dict[tuple[str, str, Any, Any], int] = {}

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        schema = (body.get("response_format") or {}).get("json_schema", {})
        text = "\n".join(m["content"] for m in body["messages"] if m.get("content"))
        if schema.get("name") == "user_reply":
            return Reply(json.dumps({"reply": "6月5日上午10点，30分钟，标题“一对一”，参会人王芳。"},
                                    ensure_ascii=False))
        sid = next(s for s in SCRIPTS if _request(s) in text)
        script = SCRIPTS[sid]
        if not schema:  # KuaiAgent's concluder: the answer as plain text
            return Reply(script[-1])
        protocol = schema["name"].removesuffix("_step")
        key = (sid, protocol, body.get("seed"), body.get("temperature"))
        index = self.steps.get(key, 0)
        self.steps[key] = index + 1
        steps = script[:-1]
        if index == len(steps):
            return Reply(json.dumps(finish_json(protocol, script[-1]), ensure_ascii=False))
        calls = steps[index]
        if sid == "shop-tracking" and self.wrong_first and body.get("temperature") == 0:
            calls = [("get_order", {"order_id": "O-1002"})]
        return Reply(json.dumps(step_json(protocol, calls), ensure_ascii=False))


def _request(scenario_id: str) -> str:
    return RECORDS_BY_ID[scenario_id].scenario.request


RECORDS_BY_ID: dict[str, ScenarioRecord] = {}


@pytest.fixture(scope="module")
def demo() -> Any:
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    scenarios = {s.id: s for s in load_scenarios(DEMO / "scenarios.yaml", catalog)}

    async def records() -> dict[str, ScenarioRecord]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            out = {}
            for sid in SCRIPTS:
                run = await execute_ground_truth(scenarios[sid], episode)
                out[sid] = ScenarioRecord(scenarios[sid], "train", episode.now,
                                          run.initial_state, run.expected_state)
            return out

    RECORDS_BY_ID.update(asyncio.run(records()))
    return catalog


def _synthesize(tmp_path: Path, server: OpenAITestServer, catalog: Any, scenario_ids: list[str],
                templates: tuple[str, ...], **synthesis: Any) -> SynthesisResult:
    role = {"provider": "openai", "model": "teacher", "base_url": server.base_url,
            "max_retries": 0}
    config = RunConfig.model_validate({
        # The messages form asks the teacher as the student role (an endpoint: as it is).
        "llm": {"teacher": role, "judge": role, "student": role,
                "cache_dir": str(tmp_path / "cache")},
        "synthesis": {"structured_output": "all", "templates_per_scenario": len(templates),
                      "concurrency": 1, "max_steps": 5, "work_dir": str(tmp_path / "work"),
                      **synthesis}})
    cfg = config.synthesis
    loaded = {f"bench-{t}": benchmark_template(t) for t in templates}
    records = [RECORDS_BY_ID[s] for s in scenario_ids]
    ask = ask_user_tool()
    offered = {r.scenario.environment: (*(t.name for t in catalog.offered_tools(
        r.scenario.environment)), ask.name) for r in records}
    tools = {**{t.name: t for t in catalog.training_tools()}, ask.name: ask}
    plan = scenario_combinations(records, loaded, offered, cfg, seed=0)
    framing = RowFraming.from_config(cfg) if cfg.form == "messages" else None

    async def go() -> SynthesisResult:
        async with LLMGateway(config.llm) as gateway, executor_for(
                catalog, config.environments.tools, gateway=gateway) as executor:
            verification = Verification({r.scenario.id: r for r in records},
                                        Episode(catalog, executor, gateway=gateway),
                                        config.verifier)
            done = await synthesize_trajectories(
                plan, loaded, tools, executor=executor, gateway=gateway,
                settings=cfg, seed=0, concurrency=1, teacher_model="teacher",
                checkpoint=SynthesisCheckpoint(tmp_path / "work"), attempts=cfg.attempts,
                stop_at_first_pass=cfg.stop_at_first_pass, verification=verification,
                framing=framing)
        return assemble_synthesis(plan, done, attempts=cfg.attempts,
                                  stop_at_first_pass=cfg.stop_at_first_pass)

    return asyncio.run(go())


def test_parallel_calls_end_to_end_in_every_format(tmp_path, openai_server, demo) -> None:
    server = openai_server(ScriptedAgent())
    result = _synthesize(tmp_path, server, demo, ["trv-flight-and-train"], TEMPLATES)
    assert len(result.rows) == len(TEMPLATES), result.rejects
    record = RECORDS_BY_ID["trv-flight-and-train"]

    async def reread(row: dict[str, Any]) -> Any:
        async with executor_for(demo, ToolsConfig()) as executor:
            rollout = from_steps(row["steps"], row["protocol"], tools=row["tools"])
            return await verify(record.scenario, record.expected_state, rollout,
                                Episode(demo, executor), RunConfig().verifier,
                                initial_state=record.start_state)

    for row in result.rows:
        assert row["verified"] and row["reward"] == pytest.approx(1.0)
        # The messages form: one assistant turn with both calls, then both results.
        turn = next(m for m in row["messages"] if m.get("tool_calls"))
        assert [c["function"]["name"] for c in turn["tool_calls"]] == ["search_flights",
                                                                        "search_trains"]
        # The template form reads back, in its own format, to the same passing trajectory.
        verdict = asyncio.run(reread(row))
        assert verdict.passed, (row["protocol"], verdict.reasons, verdict.details)


def test_asking_the_user_makes_a_multi_turn_trajectory_that_passes(tmp_path, openai_server,
                                                                   demo) -> None:
    server = openai_server(ScriptedAgent())
    result = _synthesize(tmp_path, server, demo, ["cal-missing-one-on-one"], ("react",))
    assert len(result.rows) == 1, result.rejects
    roles = [m["role"] for m in result.rows[0]["messages"]]
    assert roles[:5] == ["system", "user", "assistant", "user", "assistant"]
    assert result.rows[0]["messages"][3]["content"].startswith("6月5日上午10点")
    # The simulated user was given the scenario's hidden information, once.
    asks = [r for r in server.requests if (r.body.get("response_format") or {}).get(
        "json_schema", {}).get("name") == "user_reply"]
    assert len(asks) == 1 and "不用会议室" in asks[0].body["messages"][1]["content"]


def test_a_tool_call_where_none_is_needed_is_rejected_for_its_timing(tmp_path, openai_server,
                                                                      demo) -> None:
    server = openai_server(ScriptedAgent())
    result = _synthesize(tmp_path, server, demo, ["trv-no-tool-packing"], ("react",),
                         attempts=1)
    assert result.rows == []
    reject = next(r for r in result.rejects if "/step" not in r["item_id"])
    assert reject["reason"] == "timing" and "verifier" in reject["detail"]
    attempt = result.attempts[0]
    assert not attempt["passed"] and attempt["components"]["timing_quality"] == 0.0


@pytest.mark.parametrize("stop, expected", [(True, 2), (False, 3)])
def test_k_attempts_stop_at_the_first_pass_or_run_all(tmp_path, openai_server, demo, stop,
                                                      expected) -> None:
    server = openai_server(ScriptedAgent(wrong_first=True))
    result = _synthesize(tmp_path, server, demo, ["shop-tracking"], ("react",), attempts=3,
                         stop_at_first_pass=stop)
    assert [a["attempt"] for a in result.attempts] == list(range(expected))
    assert [a["passed"] for a in result.attempts] == [False] + [True] * (expected - 1)
    assert len(result.rows) == expected - 1
    assert result.stats["pass_at_k"]["all"]["pass@k"] == 1.0
    assert result.stats["pass_at_k"]["all"]["pass^k"] == 0.0
    first = result.attempts[0]
    assert first["reason"] in ("state", "answer") and first["reward"] < result.attempts[1]["reward"]


class GrammarFollower:
    """A teacher that takes the first tool its grammar admits from a fixed preference
    (list_orders before get_order): alone it asks for the wrong tool; guided, it can only write
    the ground truth's. Its second step finishes with the tracking number (attempts are told
    apart by their seed)."""

    PREFERENCE = {"list_orders": {"customer_id": "C001"}, "get_order": {"order_id": "O-1001"}}

    def __init__(self) -> None:
        self.steps: dict[Any, int] = {}

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        schema = body["response_format"]["json_schema"]["schema"]
        branches = schema.get("anyOf", [schema])
        admitted = [b["properties"]["action"]["const"] for b in branches
                    if "action" in b["properties"]]
        step = self.steps[body["seed"]] = self.steps.get(body["seed"], -1) + 1
        if step or not admitted:
            return Reply(json.dumps({"thought": "done", "final_answer": "物流单号是 SF123456789。"},
                                    ensure_ascii=False))
        tool = next(t for t in self.PREFERENCE if t in admitted)
        return Reply(json.dumps({"thought": "look it up", "action": tool,
                                 "action_input": self.PREFERENCE[tool]}))


def test_a_guided_attempt_steers_the_grammar_not_the_prompt(tmp_path, openai_server,
                                                             demo) -> None:
    server = openai_server(GrammarFollower())
    result = _synthesize(tmp_path, server, demo, ["shop-tracking"], ("react",), attempts=2,
                         guided_attempts=1, stop_at_first_pass=False)
    alone, guided = result.attempts
    assert (alone["guided"], alone["passed"]) == (False, False)
    assert (guided["guided"], guided["passed"]) == (True, True), guided["verifier_reasons"]
    assert [r["guided"] for r in result.rows] == [True]
    # The teacher saw the same prompt; only what its grammar admitted differed.
    assert alone["steps"][0]["prompt"] == guided["steps"][0]["prompt"]
    firsts = [r.body for r in server.requests if r.body["messages"][0]["content"]
              == alone["steps"][0]["prompt"] and len(r.body["messages"]) == 1]
    schemas = [b["response_format"]["json_schema"]["schema"] for b in firsts]
    assert len(schemas[0]["anyOf"]) > 3 and "final_answer" in json.dumps(schemas[0])
    assert schemas[1]["properties"]["action"]["const"] == "get_order"
    assert [b["temperature"] for b in firsts] == [0.0, 0.0]  # the first guided one is greedy
    # pass@k is the teacher's own: the guided pass is counted apart.
    assert result.stats["pass_at_k"]["all"]["pass@k"] == 0.0
    assert result.stats["guided"] == {"attempts": 1, "passed": 1}


def _made(*tools: str) -> list[ToolCallRecord]:
    return [ToolCallRecord(i, "", tool, {}, Observation(tool=tool, kind=None, ok=True,
                                                        content="", elapsed_s=0.0))
            for i, tool in enumerate(tools)]


@pytest.mark.parametrize("scenario_id, made, tools, most, finish", [
    # multi_step, in the ground truth's order: search, then book, then the finish
    ("trv-book-cheapest-flight", (), ["search_flights"], 1, False),
    ("trv-book-cheapest-flight", ("search_flights",), ["book_flight"], 1, False),
    ("trv-book-cheapest-flight", ("search_flights", "book_flight"), [], 1, True),
    # a wrong call does not count for the ground truth
    ("trv-book-cheapest-flight", ("search_hotels",), ["search_flights"], 1, False),
    # a parallel step: both calls at once, or what is left of them
    ("trv-flight-and-train", (), ["search_flights", "search_trains"], 2, False),
    ("trv-flight-and-train", ("search_trains",), ["search_flights"], 1, False),
    ("trv-hotels-two-cities", ("search_hotels",), ["search_hotels"], 1, False),
    # missing_info asks first
    ("trv-missing-flight", (), [ASK_USER], 1, False),
    ("trv-missing-flight", (ASK_USER,), ["search_flights"], 1, False),
    # no_tool and irrelevant: only the answer
    ("trv-no-tool-packing", (), [], 1, True),
    ("trv-irrelevant-taxi", (), [], 1, True),
])
def test_guided_steps_admit_the_ground_truths_next_tools(demo, scenario_id, made, tools, most,
                                                         finish) -> None:
    scenarios = {s.id: s for s in load_scenarios(DEMO / "scenarios.yaml", demo)}
    offered = [*demo.offered_tools("travel"), ask_user_tool()]
    calls = _made(*made)
    if made[:1] == (ASK_USER,):
        calls = [ToolCallRecord(0, "", ASK_USER, {"question": "?"}, calls[0].observation)]
    step = guided_choices(scenarios[scenario_id], calls, offered)
    assert ([t.name for t in step.tools], step.most_calls, step.finish) == (tools, most, finish)


@pytest.mark.parametrize("synthesis, problem", [
    ({"attempts": 2, "guided_attempts": 3, "structured_output": "all"}, "exceeds attempts"),
    ({"attempts": 2, "guided_attempts": 1, "structured_output": "json_protocols"},
     "structured_output: all"),
])
def test_guided_attempts_need_attempts_and_a_grammar(synthesis, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        RunConfig.model_validate({"synthesis": synthesis})


def test_guided_by_calls_fixes_what_is_left_of_the_step(demo) -> None:
    scenarios = {s.id: s for s in load_scenarios(DEMO / "scenarios.yaml", demo)}
    offered = [*demo.offered_tools("travel"), ask_user_tool()]
    chengdu = ToolCallRecord(0, "", "search_hotels", {"location": "Chengdu"},
                             Observation(tool="search_hotels", kind=None, ok=True, content="",
                                         elapsed_s=0.0))
    step = guided_choices(scenarios["trv-hotels-two-cities"], [chengdu], offered, by="calls")
    assert step.arguments == {"search_hotels": [{"location": "Hangzhou"}]}
    first = guided_choices(scenarios["trv-hotels-two-cities"], [], offered, by="calls")
    assert first.most_calls == 2
    assert first.arguments == {"search_hotels": [{"location": "Chengdu"}, {"location": "Hangzhou"}]}
    assert guided_choices(scenarios["trv-hotels-two-cities"], [], offered).arguments is None
    # A call matching a later ground-truth call exactly counts for that one, not the first.
    hangzhou = ToolCallRecord(0, "", "search_hotels", {"location": "Hangzhou"},
                              chengdu.observation)
    step = guided_choices(scenarios["trv-hotels-two-cities"], [hangzhou], offered, by="calls")
    assert step.arguments == {"search_hotels": [{"location": "Chengdu"}]}


def test_a_guided_step_whose_tools_are_not_offered_may_only_finish(demo) -> None:
    scenarios = {s.id: s for s in load_scenarios(DEMO / "scenarios.yaml", demo)}
    others = [t for t in demo.offered_tools("travel") if t.name != "search_flights"]
    step = guided_choices(scenarios["trv-flights-bj-gz"], [], others)
    assert (step.tools, step.finish) == ([], True)


class FactsFollower:
    """A teacher that makes the ground truth's calls (SCRIPTS) and then finishes with the first
    of its answers its grammar admits: alone it says it looked the order up, without the
    tracking number (the verifier fails that); held to the facts, only the answer that states it
    is admitted. The concluder (KuaiAgent) does the same, in JSON when it is given a schema."""

    ANSWERS = ("I have looked it up for you.", "物流单号是 SF123456789。")

    def __init__(self) -> None:
        self.inner = ScriptedAgent()

    def _first_admitted(self, schema: dict[str, Any] | None, shape: Any) -> str:
        for answer in self.ANSWERS:
            if schema is None or Draft202012Validator(schema).is_valid(shape(answer)):
                return answer
        raise AssertionError(f"no answer the grammar admits: {schema}")

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        schema = (body.get("response_format") or {}).get("json_schema", {})
        if not schema:  # KuaiAgent's concluder, free
            return Reply(self._first_admitted(None, str))
        if schema["name"] == "conclusion":
            answer = self._first_admitted(schema["schema"], lambda a: {"answer": a})
            return Reply(json.dumps({"answer": answer}, ensure_ascii=False))
        reply = self.inner(body, n)
        protocol = schema["name"].removesuffix("_step")
        finishing = json.loads(reply.content or "{}") == json.loads(json.dumps(
            finish_json(protocol, SCRIPTS["shop-tracking"][-1]), ensure_ascii=False))
        if not finishing or protocol == "kuaiagent":
            return reply
        answer = self._first_admitted(schema["schema"],
                                      lambda a: finish_json(protocol, a))
        return Reply(json.dumps(finish_json(protocol, answer), ensure_ascii=False))


@pytest.mark.parametrize("template", ["react", "autogpt", "kuaiagent"])
@pytest.mark.parametrize("facts", [False, True])
def test_a_guided_answer_held_to_the_facts_passes_the_verifier(tmp_path, openai_server, demo,
                                                               template, facts) -> None:
    server = openai_server(FactsFollower())
    result = _synthesize(tmp_path, server, demo, ["shop-tracking"], (template,), attempts=2,
                         guided_attempts=1, guided_by="calls", guided_facts=facts,
                         stop_at_first_pass=False)
    alone, guided = result.attempts
    assert (alone["guided"], alone["passed"], alone["verifier_reasons"]) == (
        False, False, ["answer"])
    assert guided["guided"] and guided["passed"] is facts, guided["verifier_reasons"]
    assert [r["guided"] for r in result.rows] == [True] * facts
    assert result.stats["pass_at_k"]["all"]["pass@k"] == 0.0  # the teacher's own: unguided
    if facts:
        row = result.rows[0]
        assert row["messages"][-1] == {"role": "assistant", "content": "物流单号是 SF123456789。"}
        # Only the guided attempt's finishing request was held to the facts.
        held = [r.body for r in server.requests if "SF123456789" in json.dumps(
            r.body.get("response_format"), ensure_ascii=False)]
        assert len(held) == 1
        if template == "kuaiagent":  # the concluder's request: the planner's finish has no answer
            assert held[0]["response_format"]["json_schema"]["name"] == "conclusion"
            assert row["steps"][-1]["completion"] == "物流单号是 SF123456789。"
        else:
            assert held[0]["seed"] == 1  # the guided attempt's


def test_a_guided_attempt_gets_the_steps_its_ground_truth_needs(tmp_path, openai_server,
                                                                demo) -> None:
    server = openai_server(ScriptedAgent())
    # missing_info: ask, then one call, then the finish; one step allowed.
    result = _synthesize(tmp_path, server, demo, ["cal-missing-one-on-one"], ("kuaiagent",),
                         attempts=2, guided_attempts=1, max_steps=1, stop_at_first_pass=False)
    alone, guided = result.attempts
    assert (alone["passed"], alone["reason"]) == (False, "step_cap"), alone
    assert guided["passed"], guided["verifier_reasons"]
    assert [s["kind"] for s in guided["steps"]] == ["plan"] * 3 + ["conclude"]
    # Each prompt says how many steps its attempt has.
    assert "最多只能思考 1 步" in alone["steps"][0]["prompt"]
    assert "最多只能思考 3 步" in guided["steps"][0]["prompt"]
    assert guided_step_floor(RECORDS_BY_ID["cal-missing-one-on-one"].scenario) == 3


class NativeAgent:
    """Plays the teacher in the messages form from SCRIPTS: the conversation it is sent says how
    far the scenario has got (a turn per assistant message so far). ``wrong_first``: offered
    tools, it asks shop-tracking for the wrong order (so only a guided attempt passes)."""

    def __init__(self, wrong_first: bool = False) -> None:
        self.wrong_first = wrong_first

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema == "user_reply":
            return Reply(json.dumps({"reply": "6月5日上午10点，30分钟，标题“一对一”，参会人王芳。"},
                                    ensure_ascii=False))
        if schema == "final_answer":  # the answer writer of a guided attempt
            sid = next(s for s in SCRIPTS if _request(s) in body["messages"][1]["content"])
            return Reply(json.dumps({"answer": SCRIPTS[sid][-1]}, ensure_ascii=False))
        request = next(m["content"] for m in body["messages"] if m["role"] == "user")
        sid = next(s for s in SCRIPTS if _request(s) == request)
        script = SCRIPTS[sid]
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        if turn >= len(script) - 1 or not body.get("tools"):
            return Reply(script[-1])
        calls = script[turn]
        if sid == "shop-tracking" and self.wrong_first:
            calls = [("get_order", {"order_id": "O-1002"})]
        if calls[0][0] == ASK_USER:
            return Reply(calls[0][1]["question"])  # a native teacher asks in plain text
        return Reply(None, tool_calls=[{"name": n, "arguments": a} for n, a in calls])


def test_the_messages_form_asks_the_teacher_in_the_conversation_its_rows_hold(
        tmp_path, openai_server, demo) -> None:
    server = openai_server(NativeAgent())
    result = _synthesize(tmp_path, server, demo, ["trv-flight-and-train",
                                                  "cal-missing-one-on-one"], ("react",),
                         form="messages", attempts=1)
    assert len(result.rows) == 2, result.rejects
    parallel, asked = result.rows
    assert parallel["verified"] and parallel["steps"] == [] and parallel["n_tool_calls"] == 2
    turn = next(m for m in parallel["messages"] if m.get("tool_calls"))
    assert [c["function"]["name"] for c in turn["tool_calls"]] == ["search_flights",
                                                                    "search_trains"]
    # The teacher was sent the row's own conversation (its system message: the closed loop's
    # framing of the scenario) with the offered tools, and answered in its last turn.
    last = [r.body for r in server.requests if r.body["messages"][1]["content"]
            == parallel["messages"][1]["content"]][-1]
    sent = next(m for m in last["messages"] if m.get("tool_calls"))["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in sent] == [  # OpenAI's JSON strings
        c["function"]["arguments"] for c in turn["tool_calls"]]
    assert [m["role"] for m in last["messages"]] == [m["role"] for m in parallel["messages"][:-1]]
    assert last["messages"][0]["content"].startswith(
        "You are a careful assistant") or "当前时间" in last["messages"][0]["content"]
    assert {t["function"]["name"] for t in last["tools"]} >= {"search_flights", "ask_user"}
    # A text turn before any call, with information only the user has, was a question.
    roles = [m["role"] for m in asked["messages"]]
    assert roles[:5] == ["system", "user", "assistant", "user", "assistant"]
    assert asked["messages"][3]["content"].startswith("6月5日上午10点")


def test_a_guided_messages_attempt_makes_the_ground_truths_calls_and_the_teacher_answers(
        tmp_path, openai_server, demo) -> None:
    server = openai_server(NativeAgent(wrong_first=True))
    result = _synthesize(tmp_path, server, demo, ["shop-tracking"], ("react",), form="messages",
                         attempts=2, guided_attempts=1, guided_by="calls")
    alone, guided = result.attempts
    assert (alone["guided"], alone["passed"]) == (False, False)
    assert (guided["guided"], guided["passed"]) == (True, True), guided["verifier_reasons"]
    call = next(m for m in guided["messages"] if m.get("tool_calls"))["tool_calls"][0]
    assert call["function"] == {"name": "get_order", "arguments": {"order_id": "O-1001"}}
    # The guided attempt asked the teacher once, to word the answer around the facts.
    written = [r.body for r in server.requests
               if r.body.get("response_format", {}).get("json_schema", {}).get("name")
               == "final_answer"]
    assert len(written) == 1 and "tools" not in written[0]
    prompt = written[0]["messages"][1]["content"]
    assert "SF123456789" in prompt and "O-1001" in prompt  # the fact, and what the call returned
    assert result.rows[0]["final_answer"] == "物流单号是 SF123456789。"
    assert result.stats["pass_at_k"]["all"]["pass@k"] == 0.0


@pytest.mark.parametrize("synthesis, problem", [
    ({"form": "messages", "use_queries": True}, "scenarios only"),
    ({"form": "messages", "attempts": 2, "guided_attempts": 1, "guided_by": "tools"},
     "guided_by must be calls"),
    ({"form": "messages", "attempts": 2, "guided_attempts": 1, "guided_by": "calls",
      "guided_facts": True}, "guided_facts false"),
])
def test_the_messages_form_takes_scenarios_and_guides_by_calls(synthesis, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        RunConfig.model_validate({"synthesis": synthesis})


class ForgetfulWriter(NativeAgent):
    """Words its first answer without the fact (the tracking number), its second with it."""

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema == "final_answer" and body.get("temperature") == 0:
            return Reply(json.dumps({"answer": "订单已经发货了。"}, ensure_ascii=False))
        return super().__call__(body, n)


def test_the_answer_is_worded_again_until_it_states_the_facts(tmp_path, openai_server,
                                                              demo) -> None:
    server = openai_server(ForgetfulWriter(wrong_first=True))
    result = _synthesize(tmp_path, server, demo, ["shop-tracking"], ("react",), form="messages",
                         attempts=2, guided_attempts=1, guided_by="calls")
    written = [r.body for r in server.requests
               if r.body.get("response_format", {}).get("json_schema", {}).get("name")
               == "final_answer"]
    assert [b["temperature"] for b in written] == [0.0, 0.7]  # then attempt_temperature
    assert result.attempts[1]["passed"] and len(result.rows) == 1



class OffScript(NativeAgent):
    """Offered tools, calls one nobody offered; asked without tools (a guided question turn),
    calls one all the same; or its endpoint refuses every native turn."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def __call__(self, body: dict[str, Any], n: int) -> Reply | Fail:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema in ("user_reply", "final_answer"):
            return super().__call__(body, n)
        if self.mode == "refused":
            return Fail(400, message="bad request")
        if self.mode == "unknown" and body.get("tools"):
            return Reply(None, tool_calls=[{"name": "search_orders", "arguments": {}}])
        if self.mode == "call_in_question" and not body.get("tools"):
            return Reply(None, tool_calls=[{"name": "calendar_list_events",
                                            "arguments": {"date": "2025-06-05"}}])
        return super().__call__(body, n)


@pytest.mark.parametrize("mode, scenario_id, guided, reason", [
    ("unknown", "shop-tracking", 0, "invalid_tool"),  # rejected, not a crash of the run
    ("call_in_question", "cal-missing-one-on-one", 1, "invalid_tool"),
    ("refused", "shop-tracking", 0, "teacher_failed"),  # named for the teacher, not the role
])
def test_a_native_turn_that_cannot_be_used_ends_the_attempt(tmp_path, openai_server, demo, mode,
                                                            scenario_id, guided, reason) -> None:
    server = openai_server(OffScript(mode))
    result = _synthesize(tmp_path, server, demo, [scenario_id], ("react",), form="messages",
                         attempts=max(1, guided), guided_attempts=guided, guided_by="calls")
    assert result.rows == []
    reject = next(r for r in result.rejects if "/step" not in r["item_id"])
    assert reject["reason"] == reason, reject
