"""Attempts rows for preference tests: planted variations of the demo scenarios (right, wrong
argument, redundant call ...), each verified by the real verifier, as synthesis stores them."""

from __future__ import annotations

import asyncio
from typing import Any

from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.replay import Episode, executor_for
from agentune.tasks.verifier.rollout import from_messages
from agentune.tasks.verifier.verify import verify

from support.planted import plant
from support.scripted_agents import demo_records

TOOL = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}


def attempt_rows(scenario_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One attempts row per planted variation of each demo scenario (every variation of a
    scenario is an attempt of one combination), verdicts from the verifier."""
    catalog, records = demo_records("train")
    chosen = [r for r in records if scenario_ids is None or r.scenario.id in scenario_ids]

    async def run() -> list[dict[str, Any]]:
        rows = []
        async with executor_for(catalog, ToolsConfig()) as executor:
            episode = Episode(catalog, executor)
            for record in chosen:
                s = record.scenario
                offered = [t.name for t in catalog.offered_tools(s.environment)]
                tools = [t.to_openai() for t in catalog.offered_tools(s.environment)]
                for k, planted in enumerate(plant(s, offered)):
                    verdict = await verify(s, record.expected_state,
                                           from_messages(planted.messages), episode,
                                           VerifierConfig(), initial_state=record.start_state,
                                           now=record.now)
                    rows.append({
                        "id": f"{s.id}.c0.a{k}", "combination_id": f"{s.id}.c0",
                        "scenario_id": s.id, "kind": s.kind, "lang": s.lang,
                        "template_id": "react", "protocol": "react", "attempt": k, "guided": False,
                        "passed": verdict.passed, "reason": None if verdict.passed else "verifier",
                        "reward": verdict.reward, "components": verdict.components,
                        "penalties": verdict.penalties, "verifier_reasons": verdict.reasons,
                        "verifier_version": verdict.version, "messages": planted.messages,
                        "tools": tools, "steps": [], "variant": planted.variant})
        return rows

    return asyncio.run(run())
