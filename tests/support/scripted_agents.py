"""Scripted agents for closed-loop tests: functions of the conversation an OpenAI-compatible
test server is sent, playing a fixed policy over the demo scenarios (matched by their request)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from agentune.config.build_scenarios import BuildScenariosConfig
from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.build_scenarios.stage import execute_all
from agentune.tasks.common.schemas import SCENARIO_FEATURES
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord, load_scenarios
from agentune.tasks.environments.session import DEFAULT_NOW
from agentune.tasks.store.artifact_store import ArtifactStore

from support.openai_server import Action, Hang, Reply
from support.planted import ideal_answer

DEMO = PROJECT_ROOT / "data" / "demo"


def demo_records(split: str = "heldout") -> tuple[EnvironmentCatalog, list[ScenarioRecord]]:
    """The demo catalog and every demo scenario with its ground truth run, all in ``split``."""
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)
    scenarios = load_scenarios(DEMO / "scenarios.yaml", catalog)

    async def records() -> list[ScenarioRecord]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            out = []
            for s in scenarios:
                run = await execute_ground_truth(s, episode)
                out.append(ScenarioRecord(s, split, DEFAULT_NOW, run.initial_state,
                                          run.expected_state))
            return out

    return catalog, asyncio.run(records())


Policy = Callable[[ScenarioRecord, list[dict[str, Any]], EnvironmentCatalog], Reply]


def perfect(record: ScenarioRecord, messages: list[dict[str, Any]],
            catalog: EnvironmentCatalog) -> Reply:
    s = record.scenario
    if s.hidden and not any(m["role"] == "user" for m in messages[2:]):
        return Reply("请问具体信息是什么？" if s.lang == "zh" else "Could you give me the details?")
    done = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
    if done < len(s.ground_truth):
        return Reply("", tool_calls=[{"name": c.name, "arguments": c.arguments}
                                     for c in s.ground_truth[done]])
    return Reply(ideal_answer(s, list(s.facts)))


def wrong_tool(record: ScenarioRecord, messages: list[dict[str, Any]],
               catalog: EnvironmentCatalog) -> Reply:
    """Calls, once, an offered tool the ground truth never calls, then answers with the facts."""
    s = record.scenario
    if any(m.get("tool_calls") for m in messages):
        return Reply(ideal_answer(s, list(s.facts)))
    needed = {c.name for c in s.calls()}
    other = next(t for t in catalog.offered_tools(s.environment) if t.name not in needed)
    return Reply("", tool_calls=[{"name": other.name, "arguments": {}}])


def scripted(records: list[ScenarioRecord], catalog: EnvironmentCatalog,
             policy: Callable[[dict[str, Any]], Policy]) -> Callable[[dict[str, Any], int], Reply]:
    """The server's script: the simulated user's requests (JSON replies) answered with the
    hidden information; the agent's with ``policy(body)``'s turn for the scenario asked."""
    by_request = {r.scenario.request: r for r in records}

    def answer(body: dict[str, Any], n: int) -> Reply:
        if body.get("response_format"):
            said = body["messages"][-1]["content"]
            hidden = next(r.scenario.hidden for r in records
                          if r.scenario.hidden and r.scenario.request in said)
            return Reply(json.dumps({"reply": hidden}, ensure_ascii=False))
        messages = body["messages"]
        request = next(m["content"] for m in messages if m["role"] == "user")
        return policy(body)(by_request[request], messages, catalog)

    return answer




def publish_demo_scenarios(store: ArtifactStore, only: Callable[[dict[str, Any]], bool] | None
                           = None, split: str | None = None) -> list[dict[str, Any]]:
    """The demo scenarios with their ground truth run and splits, as build_scenarios publishes
    them; ``only`` keeps some rows, ``split`` moves the kept ones into one split."""
    catalog = load_environments(DEMO / "tools.yaml", implementations=ToolsConfig().implementations)

    async def rows() -> list[dict[str, Any]]:
        async with executor_for(catalog, ToolsConfig()) as executor:
            result = await execute_all(load_scenarios(DEMO / "scenarios.yaml", catalog),
                                       Episode(catalog, executor), BuildScenariosConfig(), seed=0)
        return result.rows

    kept = [dict(r, **({"split": split} if split else {}))
            for r in asyncio.run(rows()) if only is None or only(r)]
    store.publish("scenarios", kept, features=SCENARIO_FEATURES)
    return kept


def step_json(protocol: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A planning step making ``calls`` (in parallel when several), in ``protocol``'s JSON."""
    if protocol in ("kuaiagent", "autogpt"):
        commands = [{"name": n, "args": a} for n, a in calls]
        command = commands[0] if len(commands) == 1 else commands
        return ({"task_name": "next", "command": command} if protocol == "kuaiagent"
                else {"thoughts": {"text": "next"}, "command": command})
    items = [{"action": n, "action_input": a} for n, a in calls]
    return {"thought": "next", **items[0]} if len(items) == 1 else {"thought": "next",
                                                                      "calls": items}


def finish_json(protocol: str, answer: str) -> dict[str, Any]:
    """The finishing step with ``answer``, in ``protocol``'s JSON."""
    if protocol == "kuaiagent":
        return {"task_name": "done", "command": {"name": "task_complete", "args": {}}}
    if protocol == "autogpt":
        return {"thoughts": {"text": "done"}, "command": {"name": "finish",
                                                          "args": {"response": answer}}}
    return {"thought": "done", "final_answer": answer}


class OneStepTeacher:
    """The synthesis teacher for one-step scenarios (single and parallel calls), stateless so a
    resumed run gets the same answers: the first attempt (temperature 0) answers at once without
    the facts (the verifier fails it); a later one makes the ground-truth calls, then finishes
    with the facts once the first fact is in the prompt. The judge scores 8. ``hang_at``: that
    request (by arrival number) hangs until the server stops."""

    def __init__(self, rows: list[dict[str, Any]], hang_at: int | None = None) -> None:
        self.rows = rows
        self.hang_at = hang_at

    def __call__(self, body: dict[str, Any], n: int) -> Action:
        reply = self.reply(body)
        return Hang(600, reply) if self.hang_at is not None and n == self.hang_at else reply

    def reply(self, body: dict[str, Any]) -> Reply:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name", "")
        if schema == "answer_judgement":
            return Reply(json.dumps({"rationale": "grounded", "score": 8}))
        text = "\n".join(m["content"] for m in body["messages"] if m.get("content"))
        row = next(r for r in self.rows if r["request"] in text)
        protocol = schema.removesuffix("_step")
        facts = list(row["facts"])
        said = "; ".join(f.split("|")[0] for f in facts)
        if not schema:  # KuaiAgent's concluder: the answer as plain text
            return Reply(f"Result: {said}.")
        if body.get("temperature") == 0:
            return Reply(json.dumps(finish_json(protocol, "I cannot tell."), ensure_ascii=False))
        if facts[0].split("|")[0] in text.split(row["request"], 1)[1]:
            return Reply(json.dumps(finish_json(protocol, f"Result: {said}."),
                                    ensure_ascii=False))
        calls = [(c["name"], c["arguments"]) for c in row["ground_truth"][0]]
        return Reply(json.dumps(step_json(protocol, calls), ensure_ascii=False))
