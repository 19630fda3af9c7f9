"""Scenario attempts in the messages form (``synthesis.form: messages``): the teacher acts in its
own chat template, as the student will be trained and evaluated.

Each turn sends the conversation so far (the rows' system message, the request, the calls and
their results, a question and the user's reply) with the offered tools as ``tools=``; a local
teacher renders them with its chat template and its ``<tool_call>`` blocks are read back (the
``student`` role of the gateway is the teacher asked that way: :func:`native_teacher`). Calls run
in the scenario's session like any attempt's; a text turn before any call, in a scenario with
information only the user has, is a question the simulated user answers; any other text turn is
the final answer. There is no retry with feedback: a turn that cannot be used ends the attempt,
and the verifier judges every attempt that ends, as in the closed loop.

A guided attempt's tool turns are the ground truth's steps, made for the teacher (a native
teacher's content before its calls is empty, and so is theirs); for ``missing_info`` the teacher
first writes its question in the conversation, with no tools offered. The final answer is worded
by the teacher apart, around the scenario's facts (:mod:`.answer_writer`), up to
``max_step_retries`` + 1 times until a reply states them without a defect; the verifier judges
the attempt with the last reply like any other.

Rows have no ``steps`` form: ``outcome.steps`` stays empty.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentune.config.llm import RoleConfig
from agentune.config.synthesize import SynthesisConfig
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.environments.session import EnvironmentSession
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.types import ChatGateway, ChatRequest
from agentune.tasks.rollouts.closed_loop import native_role
from agentune.tasks.synthesize.agent_loop import (
    AgentLoop,
    LoopState,
    Rejected,
    ToolCallRecord,
    TrajectoryOutcome,
    Verification,
    check_own_injection,
)
from agentune.tasks.synthesize.answer_writer import answer_request, read_answer
from agentune.tasks.synthesize.trajectory_forms import RowFraming
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.verifier.answers import answer_defect, missing_facts
from agentune.tasks.verifier.rollout import ASK_USER

NATIVE_ROLE = "student"
"""The gateway role the messages form asks: the teacher's model, its tools through its chat
template (the teacher role itself keeps its grammar: the simulated user answers in JSON)."""


def native_teacher(teacher: RoleConfig, cache_dir: str) -> RoleConfig:
    """The teacher's role asked natively: a local teacher with the chat template its tuned
    version would be trained with (:func:`~agentune.tasks.rollouts.closed_loop.native_role`); an
    endpoint reads the tool calls server-side and is asked as it is. The role's identity is the
    teacher's: the template follows from the model."""
    if teacher.provider != "local":
        return teacher
    return native_role(teacher, resolve_model_path(teacher.model), cache_dir=cache_dir)


class NativeLoop(AgentLoop):
    """Runs one scenario combination in the messages form (see the module's docstring);
    ``framing`` gives the system message the teacher is asked with, the rows' own."""

    def __init__(self, gateway: ChatGateway, executor: ToolExecutor,
                 tools: Mapping[str, ToolSpec], settings: SynthesisConfig, seed: int,
                 verification: Verification | None, framing: RowFraming) -> None:
        super().__init__(gateway, executor, tools, settings, seed, verification)
        self.framing = framing

    async def _plan(self, outcome: TrajectoryOutcome, session: EnvironmentSession | None,
                    record: ScenarioRecord | None) -> None:
        if record is None:
            raise ValueError(f"{outcome.combination.id}: the messages form needs a scenario")
        offered = [self.tools[name].to_openai() for name in outcome.combination.tool_names]
        # The rows' system message; the template's Profile is what a "template" framing keeps.
        outcome.system = outcome.template.render_section(self._inputs(outcome), "profile")
        outcome.system = self.framing.system(outcome, self.tools, record.now)
        guide = [[(c.name, dict(c.arguments)) for c in step]
                 for step in record.scenario.ground_truth] if outcome.guided else None
        state = LoopState()
        cap, call_cap = self._step_cap(outcome), self._call_cap(outcome)
        # A scenario with information only the user has is asked about first (if it may be).
        must_ask = bool(record.scenario.hidden) and self.settings.max_user_turns > 0
        for step in range(cap):
            if guide is not None and not (must_ask and not state.questions):
                if not guide:
                    outcome.final_answer = await self._written_answer(outcome, record)
                    return
                await self._execute(outcome, step, "", guide.pop(0), session, state)
                continue
            # A guided attempt's question is text: no tools offered, and no call taken.
            thought, calls = await self._turn(outcome, step, None if guide is not None
                                              else offered)
            if guide is not None and any(name != ASK_USER for name, _ in calls):
                raise Rejected("invalid_tool", f"step {step}: a guided attempt's question "
                               f"turn called {calls[0][0]}")
            unknown = [name for name, _ in calls if name not in outcome.combination.tool_names]
            if unknown:
                raise Rejected("invalid_tool", f"step {step}: {unknown[0]!r} is not one of the "
                               "tools offered")
            if any(name == ASK_USER for name, _ in calls):
                if len(calls) > 1:
                    raise Rejected("invalid_args", f"step {step}: ask_user is a turn of its "
                                                   "own, not a parallel call")
                if state.questions >= self.settings.max_user_turns:
                    raise Rejected("too_many_questions", f"step {step}: already asked "
                                   f"{state.questions} questions (max_user_turns = "
                                   f"{self.settings.max_user_turns})")
                question = str(calls[0][1].get("question") or thought)
                await self._ask_user(outcome, step, question, record, state)
                continue
            if calls:
                if len(outcome.calls) + len(calls) > call_cap:
                    raise Rejected("tool_call_cap", f"step {step} would make call number "
                                   f"{len(outcome.calls) + len(calls)}, over max_tool_calls "
                                   f"= {call_cap}")
                await self._execute(outcome, step, thought, calls, session, state)
                continue
            acted = any(not c.asks for c in outcome.calls)
            if record.scenario.hidden and not acted and \
                    state.questions < self.settings.max_user_turns:
                await self._ask_user(outcome, step, thought, record, state)
                continue
            if len(thought.strip()) < self.settings.min_answer_chars:
                raise Rejected("empty_answer", f"step {step}: final answer {thought!r} is empty")
            outcome.final_answer = thought.strip()
            return
        raise Rejected("step_cap", f"no final answer within {cap} turns")

    async def _turn(self, outcome: TrajectoryOutcome, step: int,
                    tools: list[dict[str, Any]] | None
                    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The teacher's next turn: its text and its calls (arguments decoded)."""
        request = ChatRequest(messages=_wire(outcome.messages()), tools=tools,
                              temperature=self._temperature(outcome),
                              max_tokens=self.settings.step_max_tokens,
                              seed=self.seed + outcome.attempt,
                              frequency_penalty=self.settings.frequency_penalty)
        result = await self._ask(outcome, request, role=NATIVE_ROLE, model="teacher")
        self._check_length(outcome)
        if result.finish_reason == "length":
            raise Rejected("truncated", f"step {step}: the turn was cut off at "
                                        f"{self.settings.step_max_tokens} tokens")
        text = result.content or ""
        check_own_injection(outcome, text, f"step {step}: the teacher's turn")
        calls: list[tuple[str, dict[str, Any]]] = []
        for call in result.tool_calls:
            try:
                arguments = call.parsed_arguments()
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                raise Rejected("unparseable", f"step {step}: the arguments of {call.name} are "
                                              f"not a JSON object: {call.arguments[:200]!r}")
            calls.append((call.name, arguments))
        return text, calls

    async def _written_answer(self, outcome: TrajectoryOutcome, record: ScenarioRecord) -> str:
        """The teacher's wording of the answer (see the module's docstring): the first reply
        that states the facts without a defect, else the last readable one."""
        scenario = record.scenario
        results = [c.observation.content for c in outcome.calls if not c.asks]
        last = None
        for attempt in range(self.settings.max_step_retries + 1):
            request = answer_request(
                scenario.request, scenario.kind, scenario.facts, results, lang=scenario.lang,
                max_chars=self.settings.answer_max_chars,
                temperature=self.settings.temperature if attempt == 0
                else self.settings.attempt_temperature, seed=self.seed + attempt,
                frequency_penalty=self.settings.frequency_penalty)
            text = read_answer(await self._ask(outcome, request, role="teacher"))
            if text is None:
                continue
            last = text
            if not missing_facts(scenario.facts, text) and \
                    answer_defect(text, scenario.request) is None:
                break
        if last is None:
            raise Rejected("empty_answer", "the teacher wrote no readable answer")
        return last

    async def _ask_user(self, outcome: TrajectoryOutcome, step: int, question: str,
                        record: ScenarioRecord, state: LoopState) -> None:
        state.questions += 1
        reply = await self._user_reply(outcome, record, question)
        outcome.calls.append(ToolCallRecord(step, "", ASK_USER, {"question": question}, reply))

    async def _conclude(self, outcome: TrajectoryOutcome, record: ScenarioRecord | None) -> None:
        """The final answer is a turn of its own in the messages form."""


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the OpenAI API takes them: tool-call arguments as JSON strings (rows keep
    them as objects; a local chat template gets objects back)."""
    return [m if not m.get("tool_calls") else {**m, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": json.dumps(
            c["function"]["arguments"], ensure_ascii=False)}} for c in m["tool_calls"]]}
        for m in messages]

