"""Teacher-written scenarios: the request (format_input), the answer read as a scenario
(format_output), the LLM handed in.

For one query set the teacher sees the set's real requests and one training environment (its
description, tools and a shortened view of its data) and writes a new request there with the
calls that solve it and the facts an answer must state. The answer is constrained by a JSON
schema whose calls are one branch per tool (its name as a constant, its argument schema with
every free string bounded), so even a small grammar-constrained teacher writes calls of real
tools with well-formed arguments; whether they make sense is decided by running them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentune.config.build_scenarios import BuildScenariosConfig
from agentune.tasks.agent.prompt_templates import macro_request
from agentune.tasks.environments.catalog import EnvironmentSpec
from agentune.tasks.environments.scenarios import Scenario
from agentune.tasks.llm.types import ChatRequest, ChatResult
from agentune.tasks.tools.arguments import argument_schema

TEMPLATE = "scenario_writer.j2"
LANGUAGE_NAMES = {"zh": "Simplified Chinese (简体中文)", "en": "English"}
WORLD_MAX_CHARS = 1500
MAX_FACTS = 4


class ScenarioWriterError(ValueError):
    """A teacher answer that cannot be read as a scenario."""


@dataclass(frozen=True)
class ScenarioBrief:
    """What one teacher request is about: a query set, an environment, a language."""

    set_id: str
    environment: str
    lang: str
    examples: tuple[str, ...]
    index: int

    @property
    def scenario_id(self) -> str:
        digest = hashlib.sha1(f"{self.set_id}:{self.environment}:{self.index}".encode())
        return f"tsc-{digest.hexdigest()[:12]}"


def writer_schema(spec: EnvironmentSpec, max_calls: int, max_chars: int) -> dict[str, Any]:
    call = {"anyOf": [{
        "type": "object",
        "properties": {"name": {"const": t.name}, "arguments": argument_schema(t, max_chars)},
        "required": ["name", "arguments"], "additionalProperties": False} for t in spec.tools]}
    text = {"type": "string", "minLength": 1, "maxLength": max_chars}
    return {"type": "object", "properties": {
        "request": text,
        "calls": {"type": "array", "items": call, "maxItems": max_calls},
        "facts": {"type": "array", "items": text, "maxItems": MAX_FACTS}},
        "required": ["request", "calls", "facts"], "additionalProperties": False}


def _tool_line(name: str, description: str, parameters: Mapping[str, Any]) -> str:
    args = ", ".join(parameters.get("properties", {}))
    return f"{name}({args}): {description}"


def writer_request(brief: ScenarioBrief, spec: EnvironmentSpec, world: Mapping[str, Any],
                   cfg: BuildScenariosConfig, *, today: str, seed: int) -> ChatRequest:
    user = dict(
        environment=spec.name,
        description=spec.description.get(brief.lang) or spec.description.get("en", ""),
        tools=[_tool_line(t.name, t.description, t.parameters) for t in spec.tools],
        world=json.dumps(world, ensure_ascii=False, separators=(",", ":"))[:WORLD_MAX_CHARS],
        examples=list(brief.examples), language_name=LANGUAGE_NAMES.get(brief.lang, brief.lang),
        max_calls=cfg.max_calls, today=today,
    )
    return macro_request(TEMPLATE, user, schema_name="scenario",
                         schema=writer_schema(spec, cfg.max_calls, cfg.text_max_chars),
                         strict=False, temperature=cfg.teacher_temperature,
                         seed=seed + brief.index, max_tokens=cfg.max_tokens)


def read_scenario(brief: ScenarioBrief, result: ChatResult) -> Scenario:
    """The answer as a scenario: sequential calls (one per step), the kind from their number."""
    try:
        answer = result.parsed_content()
    except ValueError as exc:
        raise ScenarioWriterError(f"not JSON: {exc}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("request"), str):
        raise ScenarioWriterError(f"not a scenario: {(result.content or '')[:120]!r}")
    calls = answer.get("calls") or []
    facts = [f for f in answer.get("facts") or [] if isinstance(f, str) and f.strip()]
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ScenarioWriterError("calls must be a list of objects")
    kind = "no_tool" if not calls else "single_call" if len(calls) == 1 else "multi_step"
    try:
        return Scenario.model_validate({
            "id": brief.scenario_id, "environment": brief.environment, "lang": brief.lang,
            "kind": kind, "request": answer["request"].strip(),
            "ground_truth": [[{"name": c.get("name"), "arguments": c.get("arguments") or {}}]
                             for c in calls],
            "facts": facts if calls else [], "family": brief.scenario_id, "source": "teacher"})
    except ValueError as exc:
        raise ScenarioWriterError(str(exc).splitlines()[0]) from None


@dataclass(frozen=True)
class QuerySetSummary:
    set_id: str
    lang: str
    examples: tuple[str, ...]
    needed_tools: tuple[str, ...]
    """The tools the set's queries need (their likely tools)."""


def plan_briefs(sets: Sequence[QuerySetSummary], specs: Sequence[EnvironmentSpec], *,
                per_set: int) -> tuple[list[ScenarioBrief], list[str]]:
    """One brief per set and scenario, in the environment whose tools the set's queries need
    most; the sets no environment serves come back apart."""
    briefs: list[ScenarioBrief] = []
    unserved: list[str] = []
    for qs in sets:
        overlap = [(sum(t in spec.tool_names() for t in qs.needed_tools), spec.name)
                   for spec in specs]
        best = max(overlap, default=(0, ""))
        if best[0] == 0:
            unserved.append(qs.set_id)
            continue
        briefs += [ScenarioBrief(qs.set_id, best[1], qs.lang, qs.examples, len(briefs) + i)
                   for i in range(per_set)]
    return briefs, unserved
