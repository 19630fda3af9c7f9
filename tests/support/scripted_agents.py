"""Scripted agents for closed-loop tests: functions of the conversation an OpenAI-compatible
test server is sent, playing a fixed policy over the demo scenarios (matched by their request)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from agentune.config.tools import ToolsConfig
from agentune.paths import PROJECT_ROOT
from agentune.tasks.environments.catalog import EnvironmentCatalog, load_environments
from agentune.tasks.environments.replay import Episode, execute_ground_truth, executor_for
from agentune.tasks.environments.scenarios import ScenarioRecord, load_scenarios
from agentune.tasks.environments.session import DEFAULT_NOW

from support.openai_server import Reply
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


