"""The two forms of a trajectory, as one ``trajectories`` row (``schemas.TRAJECTORY_FEATURES``)
and one ``attempts`` row (``schemas.ATTEMPT_FEATURES``).

(a) ``messages`` + ``tools`` in the OpenAI chat format, ready for a chat template: the system
message (:class:`RowFraming`: by default the one a closed-loop trial of the scenario opens with,
else the template's Profile), the query as the user message, one assistant message per step
(its thought as content, ``tool_calls`` with arguments as an object; parallel calls together)
followed by the ``tool`` messages with the observations, a question to the user and the user's
reply as an assistant and a user message, and the final answer as the last assistant message
(:meth:`TrajectoryOutcome.messages`). Failed calls and the steps after them stay in: they are
the reflection examples.

(b) ``steps``: one ``{step, kind, prompt, completion}`` per teacher step in the template's own
text format (``plan`` for planner steps, ``conclude`` for a concluder's answer): the
KAgentInstruct shape, each step an independent instruction/input/output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agentune.config.synthesize import SynthesisConfig
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.agent.system_prompt import system_message
from agentune.tasks.synthesize.agent_loop import TrajectoryOutcome
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.language import tool_in_language


@dataclass
class RowFraming:
    """How the rows (and the teacher's prompts) present a trajectory's frame: the tools'
    descriptions (``request``: in the request's language only; ``catalog``: as written) and
    the messages form's system message (a benchmark template's name: that template's Profile
    and the clock, rendered by :func:`system_message` as the closed loop renders it for the same
    scenario; ``template``: the Profile of the template the row was synthesized in, without
    the clock). The defaults are the catalog's descriptions and the template's Profile."""

    descriptions: Literal["request", "catalog"] = "catalog"
    system_prompt: str = "template"
    _by_lang: dict[str, tuple[Mapping[str, ToolSpec], dict[str, ToolSpec]]] = field(
        default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, cfg: SynthesisConfig) -> RowFraming:
        return cls(cfg.tool_descriptions, cfg.system_prompt)

    def tools(self, tools: Mapping[str, ToolSpec], lang: str) -> Mapping[str, ToolSpec]:
        """``tools`` as a request in ``lang`` is shown them (made once per language)."""
        if self.descriptions == "catalog":
            return tools
        lang = "zh" if lang == "zh" else "en"
        made = self._by_lang.get(lang)
        if made is None or made[0] is not tools:
            made = self._by_lang[lang] = (tools, {name: tool_in_language(t, lang)
                                                  for name, t in tools.items()})
        return made[1]

    def system(self, outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
               now: datetime) -> str:
        """The system message of ``outcome``'s rows; ``now``: its scenario's clock."""
        if self.system_prompt == "template":
            return outcome.system
        combo = outcome.combination
        offered = [tools[name].to_openai() for name in combo.tool_names]
        return system_message(benchmark_template(self.system_prompt), combo.query, offered,
                              lang=combo.lang, now=now)


def framed_messages(outcome: TrajectoryOutcome, system: str | None) -> list[dict[str, Any]]:
    """``outcome``'s messages with ``system`` as their system message (None: as the loop
    wrote it, the template's Profile)."""
    messages = outcome.messages()
    if system is None:
        return messages
    rest = messages[1:] if messages and messages[0]["role"] == "system" else messages
    return [{"role": "system", "content": system}, *rest] if system else rest


def attempt_id(outcome: TrajectoryOutcome) -> str:
    """A scenario combination's attempts are ``<combination>.a<k>``; a plain query's one attempt
    is the combination itself."""
    combo = outcome.combination
    return combo.id if combo.scenario_id is None else f"{combo.id}.a{outcome.attempt}"


def trajectory_row(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                   teacher_model: str, system: str | None = None) -> dict[str, Any]:
    """The ``trajectories`` row of an accepted outcome (``system``: its system message, see
    :func:`framed_messages`)."""
    if not outcome.accepted:
        raise ValueError(f"{outcome.combination.id} was rejected ({outcome.reason})")
    combo, template = outcome.combination, outcome.template
    verdict = outcome.verdict
    return {
        "id": attempt_id(outcome),
        "query_id": combo.query_id,
        "set_id": combo.set_id,
        "query": combo.query,
        "lang": combo.lang,
        "template_id": template.id,
        "template_source": template.source,
        "protocol": template.protocol,
        "task_type": combo.task_type,
        "messages": framed_messages(outcome, system),
        "tools": [tools[name].to_openai() for name in combo.tool_names],
        "steps": [dict(step) for step in outcome.steps],
        "n_steps": len(outcome.steps),
        "n_tool_calls": len(outcome.calls),
        "final_answer": outcome.final_answer or "",
        "judge_score": outcome.judge_score,
        "scenario_id": combo.scenario_id,
        "kind": combo.kind,
        "verified": verdict is not None,
        "reward": verdict.reward if verdict is not None else None,
        "attempt": outcome.attempt,
        "guided": outcome.guided,
        "source": "synthesized",
        "teacher_model": teacher_model,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
    }


def attempt_row(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                system: str | None = None) -> dict[str, Any]:
    """The ``attempts`` row of a verified attempt, passed or not (framed as its trajectory
    row: preference pairs are trained on these messages)."""
    combo, verdict = outcome.combination, outcome.verdict
    if verdict is None:
        raise ValueError(f"{attempt_id(outcome)} was not verified")
    return {
        "id": attempt_id(outcome), "combination_id": combo.id, "scenario_id": combo.scenario_id,
        "kind": combo.kind, "lang": combo.lang, "template_id": outcome.template.id,
        "protocol": outcome.template.protocol, "attempt": outcome.attempt,
        "guided": outcome.guided, "passed": outcome.accepted, "reason": outcome.reason, "reward": verdict.reward,
        "components": verdict.components, "penalties": verdict.penalties,
        "verifier_reasons": list(verdict.reasons), "verifier_version": verdict.version,
        "messages": framed_messages(outcome, system),
        "tools": [tools[name].to_openai() for name in combo.tool_names],
        "steps": [dict(step) for step in outcome.steps],
    }
