"""Derived rows checked by the verifier before they are kept (a row that fails is a reject).

Every derived row is read as the verifier reads a trajectory (``rollout.from_messages``), and
each of its calls must name a tool of the row's own offer with arguments valid under that tool's
schema (the verifier's format rule). A row that calls nothing (a relevance flip, a general row
with tools) is then judged by :func:`~agentune.tasks.verifier.verify.verify` itself as a scenario
of its kind (``irrelevant``, ``no_tool``) whose environment is the row's offer: no call runs, so
no environment is needed; the verdict checks that nothing is called, that the answer is one
(``answers.answer_defect``) and that the timing is right. A row that calls (a shuffled offer,
masked names) replays its source's calls unchanged (the same calls, or the same under a renaming),
so the source's verdict from synthesis stands for it. The verdict is the run's verifier's
(``verifier`` settings: its weights, penalties and pass rule).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.agent.formats import tool_entries
from agentune.tasks.build_dataset.samples import Sample
from agentune.tasks.environments.catalog import EnvironmentCatalog, EnvironmentSpec
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import Scenario
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.verifier.rollout import Rollout, from_messages
from agentune.tasks.verifier.verify import Verdict, call_problem, verify

OFFER = "offer"
"""The environment a no-call row is judged in: its offered tools, nothing behind them."""
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_NO_TOOLS = ToolExecutor((), ToolsConfig(implementations={}))
"""The executor a no-call row is judged with: nothing is called, so nothing needs executing
(an executor of no tools holds no state, so every row shares it)."""


def tool_specs(tools: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    """A row's offer (OpenAI tool schemas, or flat ones) as the verifier's tool specs."""
    return tuple(ToolSpec(e["name"], e["description"], dict(e["parameters"] or _EMPTY_PARAMETERS))
                 for e in tool_entries(tools))


def offer_problems(rollout: Rollout, tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """The verifier's format rule on the row's own offer: unreadable steps, calls of a tool not
    offered, arguments the tool's schema refuses."""
    offered = {spec.name: spec for spec in tool_specs(tools)}
    problems = []
    for i, action in enumerate(rollout.actions):
        if action.problem:
            problems.append(f"step {i}: {action.problem}")
        problems += [f"step {i}: {problem}" for call in action.calls
                     if (problem := call_problem(call, offered))]
    return problems


async def no_call_verdict(sample: Sample, rollout: Rollout,
                          verifier: VerifierConfig) -> Verdict:
    """The verifier's verdict on a row that calls nothing, as a scenario of its kind whose
    environment is the row's offer."""
    spec = EnvironmentSpec(OFFER, "implementations", tool_specs(sample.tools))
    episode = Episode(EnvironmentCatalog({OFFER: spec}), _NO_TOOLS, stage="build_dataset")
    scenario = Scenario(id="derived", environment=OFFER, kind=sample.kind or "no_tool",
                        lang="zh" if sample.lang == "zh" else "en", request=sample.query)
    return await verify(scenario, {}, rollout, episode, verifier)


def derived_problem(sample: Sample, verifier: VerifierConfig | None = None) -> str | None:
    """Why the derived row ``sample`` fails the verifier (the run's settings, ``verifier``;
    default: the verifier's defaults), or None when it passes."""
    rollout = from_messages(sample.messages)
    problems = offer_problems(rollout, sample.tools)
    if problems:
        return "; ".join(problems)
    if rollout.calls():
        return None
    verdict = asyncio.run(no_call_verdict(sample, rollout, verifier or VerifierConfig()))
    if verdict.passed:
        return None
    return f"judged as {sample.kind or 'no_tool'}: " + "; ".join(verdict.reasons + verdict.details)
