"""Scenario attempts in the messages form (``synthesis.form: messages``): the teacher acts in its
own chat template, as the student will be trained and evaluated.

An attempt is an episode of the runner (:func:`~agentune.tasks.rollouts.episode.run_episode`)
whose policy is the teacher held to the attempt's gates. Each turn sends the conversation so far
(the rows' system message, the request, the calls and their results, a question and the user's
reply) with the offered tools as ``tools=``; a local teacher renders them with its chat template
and its ``<tool_call>`` blocks are read back (the ``student`` role of the gateway is the teacher
asked that way: :func:`native_teacher`). Calls run in the scenario's session like any
attempt's; a text turn before any call, in a scenario with
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
from dataclasses import dataclass
from typing import Any

from agentune.config.llm import RoleConfig
from agentune.config.synthesize import SynthesisConfig
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.types import ChatGateway, ChatRequest
from agentune.tasks.rollouts.closed_loop import native_role
from agentune.tasks.rollouts.episode import Act, Counterparts, Limits, Trajectory, run_episode
from agentune.tasks.synthesize.agent_loop import (
    AgentLoop,
    Rejected,
    TrajectoryOutcome,
    Verification,
    check_own_injection,
    check_simulator,
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

    async def _plan(self, outcome: TrajectoryOutcome, counterparts: Counterparts,
                    record: ScenarioRecord | None) -> None:
        if record is None:
            raise ValueError(f"{outcome.combination.id}: the messages form needs a scenario")
        # The rows' system message; the template's Profile is what a "template" framing keeps.
        outcome.system = outcome.template.render_section(self._inputs(outcome), "profile")
        outcome.system = self.framing.system(outcome, self.tools, record.now)
        teacher = _TeacherTurns(self, outcome, record)
        outcome.trajectory = trajectory = Trajectory.opening(outcome.combination.query,
                                                             outcome.system)
        cap = self._step_cap(outcome)
        await run_episode(trajectory, teacher, counterparts,
                          limits=Limits(cap, self.settings.max_user_turns))
        check_simulator(trajectory)
        if not trajectory.answered:
            raise Rejected("step_cap", f"no final answer within {cap} turns")
        answer = trajectory.answer() or ""
        if not teacher.wrote_answer and len(answer.strip()) < self.settings.min_answer_chars:
            raise Rejected("empty_answer", f"step {trajectory.turns[-1]}: final answer "
                                           f"{answer!r} is empty")
        outcome.final_answer = answer.strip()

    async def _turn(self, outcome: TrajectoryOutcome, trajectory: Trajectory, step: int,
                    tools: list[dict[str, Any]] | None
                    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The teacher's next turn: its text and its calls (arguments decoded)."""
        request = ChatRequest(messages=_wire(trajectory.messages), tools=tools,
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

    async def _conclude(self, outcome: TrajectoryOutcome, record: ScenarioRecord | None) -> None:
        """The final answer is a turn of its own in the messages form."""


@dataclass
class _TeacherTurns:
    """The teacher's turns of one attempt (the policy of its episode), held to the attempt's
    gates. A guided attempt's tool turns are its ground truth's steps."""

    loop: NativeLoop
    outcome: TrajectoryOutcome
    record: ScenarioRecord
    wrote_answer: bool = False
    """The final answer was worded apart (a guided attempt's)."""

    def __post_init__(self) -> None:
        scenario = self.record.scenario
        self.offered = [self.loop.tools[name].to_openai()
                        for name in self.outcome.combination.tool_names]
        self.guide = [[(c.name, dict(c.arguments)) for c in step]
                      for step in scenario.ground_truth] if self.outcome.guided else None
        # A scenario with information only the user has is asked about first (if it may be).
        self.must_ask = bool(scenario.hidden) and self.loop.settings.max_user_turns > 0
        self.call_cap = self.loop._call_cap(self.outcome)

    async def act(self, trajectory: Trajectory, seed: int) -> Act:
        check_simulator(trajectory)
        step, settings = len(trajectory.turns), self.loop.settings
        if self.guide is not None and not (self.must_ask and not trajectory.questions):
            if not self.guide:
                self.wrote_answer = True
                return Act(await self.loop._written_answer(self.outcome, self.record),
                           question=False)
            return Act("", tuple(self.guide.pop(0)))
        # A guided attempt's question is text: no tools offered, and no call taken.
        thought, calls = await self.loop._turn(self.outcome, trajectory, step,
                                               None if self.guide is not None else self.offered)
        if self.guide is not None and any(name != ASK_USER for name, _ in calls):
            raise Rejected("invalid_tool", f"step {step}: a guided attempt's question "
                           f"turn called {calls[0][0]}")
        unknown = [name for name, _ in calls if name not in self.outcome.combination.tool_names]
        if unknown:
            raise Rejected("invalid_tool", f"step {step}: {unknown[0]!r} is not one of the "
                           "tools offered")
        if any(name == ASK_USER for name, _ in calls):
            if len(calls) > 1:
                raise Rejected("invalid_args", f"step {step}: ask_user is a turn of its "
                                               "own, not a parallel call")
            if trajectory.questions >= settings.max_user_turns:
                raise Rejected("too_many_questions", f"step {step}: already asked "
                               f"{trajectory.questions} questions (max_user_turns = "
                               f"{settings.max_user_turns})")
            return Act(str(calls[0][1].get("question") or thought), question=True)
        made = trajectory.calls() + trajectory.questions
        if calls and made + len(calls) > self.call_cap:
            raise Rejected("tool_call_cap", f"step {step} would make call number "
                           f"{made + len(calls)}, over max_tool_calls = {self.call_cap}")
        return Act(thought, tuple(calls))


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the OpenAI API takes them: tool-call arguments as JSON strings (rows keep
    them as objects; a local chat template gets objects back)."""
    return [m if not m.get("tool_calls") else {**m, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": json.dumps(
            c["function"]["arguments"], ensure_ascii=False)}} for c in m["tool_calls"]]}
        for m in messages]

