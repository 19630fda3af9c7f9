"""Closed-loop rollouts: the model under test acts in a scenario's environment, and the verifier
scores what it did.

One trial is an episode of the runner (:func:`~agentune.tasks.rollouts.episode.run_episode`):
a fresh session of the scenario's environment; the request; the model's turns, each either tool
calls (run in the session, their results fed back) or a text answer. A text answer before any
tool call, in a scenario that holds information only the user has, is taken as a question: the
simulated user (the teacher, given the hidden information) replies and the trial goes on, up to
``max_user_turns``. A call of ``ask_user`` is a question the same way, answered as its tool
result. Turns are capped (``max_steps``); a trial that hits the cap without answering is
truncated. The verifier replays the conversation in another fresh session against the scenario's
ground truth. Every trial is recorded as OpenAI messages, whichever way the model was asked.

How the model is asked is the *policy*, and it is the format the model was trained in:

- :class:`NativePolicy` (``messages`` form): the conversation and the offered tools go to the
  model as they are (``tools=``); a local model renders them with its chat template and its
  Hermes ``<tool_call>`` blocks are read back (``tool_format: chat_template``), an endpoint does
  the same server-side (vLLM's hermes parser).
- :class:`TemplatePolicy` (``steps`` form): each turn renders an agent template (ReAct, AutoGPT,
  ..., or a Meta-Agent template) with the calls so far as its memory; the answer is read in the
  template's own format; a two-stage protocol (KuaiAgent) writes its answer with its concluder.

``pass@1`` is the share of cases whose first trial passes; ``pass^k`` the share whose k trials
all pass (tau-bench's reliability), each trial with its own sampling seed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from agentune.config.llm import RoleConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.agent.formats import NONE, agent_format
from agentune.tasks.agent.prompt_templates import (
    AgentPromptInputs,
    AgentTemplate,
    PastTask,
    concluder_for,
)
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway, ChatRequest
from agentune.tasks.rollouts.episode import (
    Act,
    Counterparts,
    Limits,
    Trajectory,
    arguments_of,
    nothing_to_add,
    run_episode,
)
from agentune.tasks.rollouts.episode import Policy as EpisodePolicy
from agentune.tasks.rollouts.simulated_user import read_user_reply, user_request
from agentune.tasks.tools.language import tool_in_language
from agentune.tasks.verifier.rollout import ASK_USER, ask_user_tool
from agentune.tasks.verifier.verify import Verdict, verify


@dataclass(frozen=True)
class TrialSettings:
    """How the trials of one closed-loop run sample, gathered from several sections by the stage
    that runs them (evaluate.closed_loop or preferences.student, synthesis.user_max_chars for
    the simulated user, the run's seed): no defaults of its own."""

    trials: int
    """k: trials per case (pass^k)."""
    temperature: float
    top_p: float | None
    max_tokens: int
    max_steps: int
    """Model turns per trial."""
    max_user_turns: int
    user_max_chars: int
    seed: int


class Policy(EpisodePolicy, Protocol):
    """How the model under test is asked for its next turn, in the form it was trained in."""

    form: str
    """``messages`` (native tool calls) or ``steps`` (template prompts)."""


@dataclass
class NativePolicy:
    """Native tool calls: the conversation with ``tools=``, as a messages-trained model saw it."""

    gateway: ChatGateway
    role: str
    tools: list[dict[str, Any]]
    settings: TrialSettings
    stage: str
    form: str = "messages"

    async def act(self, trajectory: Trajectory, seed: int) -> Act:
        request = ChatRequest(messages=list(trajectory.messages), tools=self.tools or None,
                              temperature=self.settings.temperature, top_p=self.settings.top_p,
                              max_tokens=self.settings.max_tokens, seed=seed)
        try:
            result = await self.gateway.chat(self.role, request, stage=self.stage)  # type: ignore[arg-type]
        except GatewayError as exc:
            return Act(error=str(exc))
        return Act(result.content, tuple((c.name, c.arguments) for c in result.tool_calls))


@dataclass
class TemplatePolicy:
    """Template prompts: each turn is the template rendered with the calls so far, as a
    steps-trained model saw it (one user message, the completion in the template's format)."""

    gateway: ChatGateway
    role: str
    template: AgentTemplate
    tools: list[dict[str, Any]]
    settings: TrialSettings
    stage: str
    now: datetime
    lang: str
    form: str = "steps"

    async def act(self, trajectory: Trajectory, seed: int) -> Act:
        inputs = self._inputs(trajectory.messages)
        fmt = agent_format(self.template.protocol)
        text, error = await self._ask(self.template.render(inputs), seed)
        if error is not None:
            return Act(error=error)
        step = fmt.parse(text, self.tools)
        calls = [(n, a) for n, a in step.calls if n != fmt.finish_tool]
        if calls:
            thought = "" if step.thought == NONE else step.thought
            return Act(thought, tuple((n, json.dumps(a, ensure_ascii=False)) for n, a in calls))
        concluder = concluder_for(self.template.protocol)
        if concluder is None or not step.calls_tool:
            return Act(step.final_answer if step.final_answer is not None else text)
        answer, error = await self._ask(concluder.render(inputs), seed)
        return Act(error=error) if error is not None else Act((answer or "").strip())

    async def _ask(self, prompt: str, seed: int) -> tuple[str, str | None]:
        request = ChatRequest(messages=[{"role": "user", "content": prompt}],
                              temperature=self.settings.temperature, top_p=self.settings.top_p,
                              max_tokens=self.settings.max_tokens, seed=seed)
        try:
            result = await self.gateway.chat(self.role, request, stage=self.stage)  # type: ignore[arg-type]
        except GatewayError as exc:
            return "", str(exc)
        return result.content or "", None

    def _inputs(self, messages: Sequence[Mapping[str, Any]]) -> AgentPromptInputs:
        """The template's inputs: the request as goal, every call so far (a question to the user
        included, as the ``ask_user`` call it is in the steps form) with its result as memory."""
        goal = next(str(m["content"]) for m in messages if m["role"] == "user")
        results = {m.get("tool_call_id"): str(m.get("content") or "")
                   for m in messages if m["role"] == "tool"}
        memory: list[PastTask] = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                args = arguments_of(fn["arguments"])
                memory.append(PastTask(thought=str(m.get("content") or NONE),
                                       tool_name=fn["name"],
                                       tool_args=args if isinstance(args, dict) else {},
                                       observation=results.get(call["id"], "")))
            if not m.get("tool_calls") and i + 1 < len(messages) \
                    and messages[i + 1]["role"] == "user":
                memory.append(PastTask(thought=NONE, tool_name=ASK_USER,
                                       tool_args={"question": str(m.get("content") or "")},
                                       observation=str(messages[i + 1]["content"])))
        return AgentPromptInputs.for_query(
            goal, self.tools, current_time=self.now, lang=self.lang,
            max_steps=agent_format(self.template.protocol).step_limit or self.settings.max_steps,
            completed_tasks=memory)


@dataclass
class Trial:
    """One rollout and its verdict."""

    scenario_id: str
    trial: int
    group: str
    """The template group the model was asked under (``native``, or a template's key)."""
    form: str
    messages: list[dict[str, Any]]
    verdict: Verdict
    error: str | None = None

    def row(self, record: ScenarioRecord, model: str) -> dict[str, Any]:
        s = record.scenario
        return {"model": model, "scenario_id": s.id, "kind": s.kind, "lang": s.lang,
                "environment": s.environment, "split": record.split, "group": self.group,
                "form": self.form, "trial": self.trial, "passed": self.verdict.passed,
                "reward": self.verdict.reward, "components": dict(self.verdict.components),
                "reasons": list(self.verdict.reasons), "messages": self.messages,
                "error": self.error}


@dataclass
class SimulatedUser:
    """The user of a closed-loop trial: the teacher answering from the scenario's hidden
    information. With no teacher reachable, the user states what they know verbatim."""

    gateway: ChatGateway
    settings: TrialSettings
    stage: str

    async def reply(self, record: ScenarioRecord, question: str) -> str:
        scenario = record.scenario
        if not scenario.hidden:
            return nothing_to_add(scenario)
        request = user_request(scenario.request, scenario.hidden, question,
                               lang="zh" if scenario.lang == "zh" else "en",
                               max_chars=self.settings.user_max_chars, seed=self.settings.seed)
        try:
            result = await self.gateway.chat("teacher", request, stage=self.stage)  # type: ignore[arg-type]
        except GatewayError:
            return scenario.hidden
        return read_user_reply(result) or scenario.hidden


async def run_trial(record: ScenarioRecord, *, policy: Policy, episode: Episode,
                    user: SimulatedUser, system: str | None, settings: TrialSettings,
                    trial: int, group: str, verifier: VerifierConfig) -> Trial:
    """One closed-loop rollout of ``record`` under ``policy``, verified."""
    scenario = record.scenario
    trajectory = await run_episode(
        Trajectory.opening(scenario.request, system), policy,
        Counterparts.of(record, episode, user),
        limits=Limits(settings.max_steps, settings.max_user_turns),
        seed=settings.seed + 1000 * trial)
    verdict = await verify(scenario, record.expected_state, trajectory.rollout(), episode,
                           verifier, initial_state=record.start_state, now=record.now)
    return Trial(scenario.id, trial, group, policy.form, trajectory.messages, verdict,
                 trajectory.error)


def scenario_tools(catalog: EnvironmentCatalog, environment: str,
                   only: Collection[str] | None = None, *, lang: str | None = None
                   ) -> list[dict[str, Any]]:
    """The OpenAI tools an agent is offered in ``environment``: its tools (``only`` those named
    there, when given) and ``ask_user``; with ``lang``, described in that language only, as
    synthesis rows describe them (``synthesis.tool_descriptions: request``)."""
    tools = [t for t in catalog.offered_tools(environment) if only is None or t.name in only]
    return [(t if lang is None else tool_in_language(t, lang)).to_openai()
            for t in (*tools, ask_user_tool())]


def spread(records: Sequence[ScenarioRecord], limit: int | None, seed: int
           ) -> list[ScenarioRecord]:
    """At most ``limit`` records, taken round-robin over the kinds in a seeded order."""
    def rank(r: ScenarioRecord) -> str:
        return hashlib.sha256(f"{seed}:closed-loop:{r.scenario.id}".encode()).hexdigest()

    by_kind: dict[str, list[ScenarioRecord]] = {}
    for record in sorted(records, key=rank):
        by_kind.setdefault(record.scenario.kind, []).append(record)
    out: list[ScenarioRecord] = []
    while any(by_kind.values()) and (limit is None or len(out) < limit):
        for kind in sorted(by_kind):
            if by_kind[kind] and (limit is None or len(out) < limit):
                out.append(by_kind[kind].pop(0))
    return out


def native_role(role: RoleConfig, folder: Path, *, cache_dir: str,
                chat_template: str | None = None) -> RoleConfig:
    """The role asking a local model natively: its calls read from its chat template's
    ``<tool_call>`` blocks, rendered with the template agentune trains it with (a trained
    version's own; for a base model, the training variant its tuned version would get;
    ``chat_template`` overrides). The template is written once, named by its hash, beside the
    response cache."""
    if role.provider != "local":
        return role
    from transformers import AutoTokenizer

    from agentune.tasks.common.chat_audit import training_chat_template

    tokenizer = AutoTokenizer.from_pretrained(folder)
    text, _ = training_chat_template(tokenizer, chat_template)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(cache_dir) / "chat_templates" / f"{digest}.jinja"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        part.write_text(text, encoding="utf-8")
        part.replace(path)
    return role.model_copy(update={"tool_format": "chat_template", "chat_template": str(path)})


# --------------------------------------------------------------------------- scores


def rates(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """pass@1, pass^k and mean reward of trial rows; a case is a (scenario, group) pair."""
    by_case: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        by_case.setdefault((r["scenario_id"], r["group"]), []).append(r)
    cases = list(by_case.values())
    if not cases:
        return {"cases": 0, "pass@1": None, "pass^k": None, "reward": None}
    first = [min(c, key=lambda r: r["trial"]) for c in cases]
    return {"cases": len(cases),
            "pass@1": round(sum(bool(r["passed"]) for r in first) / len(first), 4),
            "pass^k": round(sum(all(r["passed"] for r in c) for c in cases) / len(cases), 4),
            "reward": round(sum(float(r["reward"]) for r in first) / len(first), 4)}


BREAKDOWNS = ("split", "kind", "lang", "environment", "group")


@dataclass
class ClosedLoopScores:
    """Trial rows of every model, and their rates overall and by split, kind, language,
    environment and template group."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def table(self) -> list[dict[str, Any]]:
        out = []
        for model in dict.fromkeys(r["model"] for r in self.rows):
            mine = [r for r in self.rows if r["model"] == model]
            out.append({"model": model, "by": "all", "value": "all", **rates(mine)})
            for key in BREAKDOWNS:
                for value in sorted({str(r[key]) for r in mine}):
                    out.append({"model": model, "by": key, "value": value,
                                **rates([r for r in mine if str(r[key]) == value])})
        return out

    def sensitivity(self) -> list[dict[str, Any]]:
        """Per model: pass@1 under each template group on the same scenarios, and its mean,
        standard deviation and largest gap (BFCL v4's format sensitivity, over MAT templates)."""
        out = []
        for model in dict.fromkeys(r["model"] for r in self.rows):
            mine = [r for r in self.rows if r["model"] == model]
            groups = sorted({r["group"] for r in mine})
            scores = {g: rates([r for r in mine if r["group"] == g])["pass@1"] for g in groups}
            values = [v for v in scores.values() if v is not None]
            if len(values) < 2:
                continue
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            out.append({"model": model, "groups": len(values), "mean": round(mean, 4),
                        "std": round(std, 4), "max_delta": round(max(values) - min(values), 4),
                        "by_group": scores})
        return out
