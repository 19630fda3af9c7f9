"""The agent loop: one combination answered step by step by the teacher, in its template's format.

An attempt is an episode of the runner (:func:`~agentune.tasks.rollouts.episode.run_episode`),
recorded as its :class:`~agentune.tasks.rollouts.episode.Trajectory`; the template's format is
its policy: each turn renders the template from that trajectory, and the rows' ``steps`` form
is what those renderings and answers were.

Per planning step: render the planner template (tools offered, goal, memory so far) -> the teacher
answers (structured output where configured) -> read the decision -> validate it (an offered
tool, arguments valid against its schema, not a call made before, not the call that just failed)
-> execute -> the observation (cut to the tool's token budget by the executor, side left, right
or middle) joins memory. Until the format's finish, or the step cap. A two-stage format
(KuaiAgent) then renders its concluder for the final answer. Then the gates: task type
consistency, a non-empty answer and, with a judge, its score.

An invalid step is asked again up to ``max_step_retries`` times, with the bad answer and what is
wrong with it appended to the conversation (a new request, so never a cache hit on the bad one);
every failed attempt is kept as a :class:`StepFailure`. Under a grammar, the retry of a
``repeated_call`` also leaves the repeated call's tool out: a weak teacher copies its last step
from the memory the prompt shows, greedy or not, and would never get to its answer otherwise.
A trajectory that cannot be completed ends as a rejected :class:`TrajectoryOutcome` with one
reason:

``unparseable`` (off-format answer), ``invalid_tool``, ``invalid_args``, ``repeated_call`` (a loop
or redundant call), ``no_reflection`` (the call that just failed, repeated: after a tool error the
next step must change course), ``truncated`` (answer cut off at max_tokens), ``empty_answer``,
``gave_up`` (ToolLLaMA's give_up_and_restart), ``step_cap``, ``no_tool_call`` /
``unneeded_tool_call`` (the task type asked for the opposite), ``simulator_failure``,
``teacher_failed`` / ``judge_failed`` (the endpoint refused the request: a 4xx),
``teacher_unavailable`` / ``judge_unavailable`` (transient faults, 429 / 5xx / timeouts / broken
bodies / no connection, outlasted the gateway's retries; see :data:`UNAVAILABLE`),
``prompt_injection`` (the teacher obeyed instructions planted in a tool result), ``off_topic``
(judge score below the threshold).

A teacher answer given as a native ``tool_calls`` list (the formats write their calls in the text;
no ``tools`` are sent) is an invalid step: ``invalid_tool`` when it names a tool not offered,
``unparseable`` otherwise, asked again like any other.

Prompt-injection gate. Tool results are data: they reach the teacher only in the observation slot
of the template (memory) and the ``tool`` messages of the training form, as the tool's JSON. The
executor flags instruction-like phrases in them (``Observation.injection``, see
:func:`~agentune.tasks.tools.observation.injection_phrases`). Once a trajectory has seen one, a step
calling a tool that was not offered is taken as obeying it and rejects the trajectory at once
(``prompt_injection``, no retry), and so does a final answer that repeats a flagged phrase or a
line of the system prompt. A trajectory whose teacher ignores the injection stays in: it shows the
behaviour training wants. The teacher's own writing is scanned too, planted or not: a step answer
(thought, call) or final answer holding an instruction-like phrase (English or Chinese, e.g.
"IGNORE ALL PREVIOUS INSTRUCTIONS", "忽略之前的所有指令") rejects the trajectory at once
(``prompt_injection``, naming the step and the phrase): training on it would teach the student to
write orders to the next model that reads its output.

Scenario episodes. A combination made from a scenario runs in a fresh session of its
environment (tools answered with the session's state), may make several independent calls in one
step (up to ``max_parallel_calls``; they run concurrently), may ask the user (``ask_user``: the
simulated user answers from the scenario's hidden information, up to ``max_user_turns``), and may
answer at once or decline. The task-type gates and the answer judge do not apply: the verifier
replays the trajectory in another fresh session and decides (``verdict``); a trajectory it fails
is rejected with the verifier's first reason (``state``, ``answer``, ``timing`` ...). Caps of every
trajectory: ``max_tool_calls`` (``tool_call_cap``), ``max_total_response_length`` teacher tokens
(``response_length_cap``).

Guided attempts (``guided_attempts``, the last of a scenario's k): STaR's rationalization for
tool use, where the hint is the ground truth. A teacher that never finds the right calls alone
still writes the thoughts and answer of a correct trajectory (with ``guided_by: tools``, the
arguments too) when its grammar admits only the next ground-truth tool (``calls``: that exact
call) and the finish only at the end. The prompt is the unguided one, so the row reads as if the
teacher had chosen so. With ``guided_facts`` the finish's grammar (a two-stage format's
concluder's) also admits only an answer stating every fact of the scenario, in the teacher's own
words around them. A guided attempt gets at least the steps its ground truth needs
(:func:`guided_step_floor`) and calls, whatever ``max_steps`` and ``max_tool_calls`` say. The
verifier judges it like any other attempt; rows say ``guided``.

A ``RunStop`` (the budget reached, a local model that cannot be loaded) propagates: the run
stops and resumes later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentune.config.synthesize import GuidedBy, SynthesisConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.agent.formats import agent_format
from agentune.tasks.agent.prompt_templates import (
    AgentPromptInputs,
    AgentTemplate,
    PastTask,
    concluder_for,
)
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import Scenario, ScenarioRecord
from agentune.tasks.environments.session import EnvironmentSession
from agentune.tasks.llm.errors import EndpointUnreachable, GatewayError
from agentune.tasks.llm.judge_answers import JudgeAnswerError
from agentune.tasks.llm.types import ChatGateway, ChatRequest, ChatResult
from agentune.tasks.rollouts.episode import (
    Act,
    Counterparts,
    Limits,
    Trajectory,
    run_episode,
)
from agentune.tasks.rollouts.simulated_user import NOTHING_TO_ADD, read_user_reply, user_request
from agentune.tasks.synthesize import STAGE
from agentune.tasks.synthesize.answer_judge import (
    JudgedCall,
    answer_judge_request,
    read_answer_score,
)
from agentune.tasks.synthesize.loop_steps import (
    Decision,
    StepFormats,
    completion_text,
    conclusion_format,
    read_conclusion,
    read_decision,
    step_request,
    uses_structured_output,
)
from agentune.tasks.synthesize.sampling import Combination
from agentune.tasks.tools.arguments import canonical_json, validate_arguments, with_defaults
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import Observation, ToolContext, injection_phrases
from agentune.tasks.verifier.rollout import ASK_USER, from_messages
from agentune.tasks.verifier.verify import Verdict, verify

UNAVAILABLE = frozenset({"teacher_unavailable", "judge_unavailable"})
"""Reasons that say nothing about the combination, only that the endpoint could not answer in
time: the synthesis run does not checkpoint them (a run that stops asks again next time; one
that completes publishes them as rejects) and stops when they pile up (the endpoint is down)."""
_LEAK_LINE_CHARS = 40
"""A final answer holding a system prompt line at least this long leaks the prompt."""
NO_TOOL_TYPE = "timing_decision"
"""The task type of queries that need no tool: the right step is to finish at once."""


@dataclass(frozen=True)
class StepFailure:
    """One attempt at a step that could not be used."""

    step: int
    attempt: int
    reason: str
    detail: str
    answer: str
    """The teacher's answer as written."""


@dataclass(frozen=True)
class ToolCallRecord:
    """One call of a step (several records of one step: parallel calls). A question to the user
    is a record of ``ask_user`` whose observation is the user's reply."""

    step: int
    thought: str
    tool: str
    arguments: dict[str, Any]
    observation: Observation

    @property
    def asks(self) -> bool:
        return self.tool == ASK_USER


@dataclass
class TrajectoryOutcome:
    """A finished combination: accepted (with everything its two forms need) or rejected."""

    combination: Combination
    template: AgentTemplate
    attempt: int = 0
    guided: bool = False
    """Steered by the scenario's ground truth (``guided_attempts``): see :func:`guided_choices`."""
    accepted: bool = False
    reason: str | None = None
    detail: str = ""
    system: str = ""
    """The template's Profile, rendered: the system message of the messages form."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    trajectory: Trajectory = field(default_factory=lambda: Trajectory([]))
    """The attempt's episode, filled in as it runs (the final answer of a two-stage format is
    written after it: :attr:`final_answer`)."""
    asks: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """The thought and arguments of each question turn where the format wrote them (the
    trajectory holds the question)."""
    final_answer: str | None = None
    failures: list[StepFailure] = field(default_factory=list)
    judge_score: float | None = None
    judge_rationale: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repairs: int = 0
    """Answers that parsed only after a repair (code fence, bare key ...)."""
    verdict: Verdict | None = None
    """The verifier's judgement (scenario combinations; also of rejected attempts, for rewards)."""

    def __post_init__(self) -> None:
        if not self.trajectory.messages:  # not run yet: the request alone
            self.trajectory = Trajectory.opening(self.combination.query)

    @property
    def calls(self) -> list[ToolCallRecord]:
        """The trajectory's calls, questions to the user included (:func:`attempt_calls`)."""
        return attempt_calls(self.trajectory, self.asks)

    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI messages form: the Profile as system message, the request, one assistant
        message per step (its calls as ``tool_calls``, parallel ones together) followed by the
        ``tool`` results; a question to the user as an assistant message and the user's reply as
        the next user message; the final answer last (none when there is none yet)."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        turns = [m for m in self.trajectory.messages if m["role"] != "system"]
        if self.trajectory.answered:  # as the format wrote it: the final answer is the attempt's
            turns.pop()
        tail = [] if self.final_answer is None else [
            {"role": "assistant", "content": self.final_answer}]
        return [*head, *turns, *tail]


class Rejected(Exception):
    """An attempt that cannot be used, with the reason the attempts table records."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _feedback(detail: str) -> str:
    return (f"That answer cannot be used: {detail}. Write this step again, exactly in the "
            "required format.")


@dataclass(frozen=True)
class Verification:
    """What verifying scenario trajectories needs: their records, the episodes to replay them
    in, and the verifier's settings."""

    scenarios: Mapping[str, ScenarioRecord]
    episode: Episode
    config: VerifierConfig


@dataclass
class LoopState:
    """The state of the planning loop between steps."""

    seen: set[tuple[str, str]] = field(default_factory=set)
    failed: set[tuple[str, str]] = field(default_factory=set)
    """The calls of the last step that failed (repeating one shows no reflection)."""
    questions: int = 0


class AgentLoop:
    """Runs one combination. ``tools`` is the whole catalog by name (``ask_user`` included when
    scenarios are synthesized); the combination names the subset offered. ``settings``: the run's
    ``synthesis`` section; ``seed``: the run's (an attempt's steps are sampled with it plus the
    attempt's number)."""

    def __init__(self, gateway: ChatGateway, executor: ToolExecutor, tools: Mapping[str, ToolSpec],
                 settings: SynthesisConfig, seed: int,
                 verification: Verification | None = None) -> None:
        self.gateway = gateway
        self.executor = executor
        self.tools = tools
        self.settings = settings
        self.seed = seed
        self.verification = verification
        self.formats = StepFormats()

    def _record(self, combination: Combination) -> ScenarioRecord | None:
        if combination.scenario_id is None:
            return None
        if self.verification is None:
            raise ValueError(f"{combination.id}: a scenario combination needs the verification")
        return self.verification.scenarios[combination.scenario_id]

    async def run(self, combination: Combination, template: AgentTemplate,
                  attempt: int = 0) -> TrajectoryOutcome:
        record = self._record(combination)
        outcome = TrajectoryOutcome(combination, template, attempt=attempt,
                                    guided=record is not None and attempt >= self._first_guided())
        counterparts = self._counterparts(outcome, record)
        try:
            await self._plan(outcome, counterparts, record)
            if record is None:
                self._check_task_type(outcome)
            await self._conclude(outcome, record)
            self._check_answer_injection(outcome)
            check_own_injection(outcome, outcome.final_answer or "", "the final answer")
            if record is None:
                await self._judge(outcome)
        except Rejected as rejected:
            outcome.reason, outcome.detail = rejected.reason, rejected.detail
        if record is not None and outcome.reason not in UNAVAILABLE:
            await self._verify(outcome, record)
        outcome.accepted = outcome.reason is None
        return outcome

    # ------------------------------------------------------------------ planning

    def _inputs(self, outcome: TrajectoryOutcome) -> AgentPromptInputs:
        combo = outcome.combination
        offered = [self.tools[name] for name in combo.tool_names]
        memory = [PastTask(thought=c.thought, tool_name=c.tool, tool_args=c.arguments,
                           observation=c.observation.content) for c in outcome.calls]
        return AgentPromptInputs.for_query(
            combo.query, [{"name": t.name, "description": t.description,
                           "parameters": t.parameters} for t in offered],
            current_time=self.settings.current_time, lang=combo.lang,
            max_steps=self._step_cap(outcome), completed_tasks=memory)

    def _step_cap(self, outcome: TrajectoryOutcome) -> int:
        """``max_steps`` (within the format's own limit); for a guided attempt at least what its
        ground truth needs (:func:`guided_step_floor`)."""
        limit = agent_format(outcome.template.protocol).step_limit
        cap = min(self.settings.max_steps, limit) if limit else self.settings.max_steps
        record = self._record(outcome.combination) if outcome.guided else None
        return max(cap, guided_step_floor(record.scenario)) if record is not None else cap

    def _call_cap(self, outcome: TrajectoryOutcome) -> int:
        """``max_tool_calls``; for a guided attempt at least its ground truth's calls."""
        record = self._record(outcome.combination) if outcome.guided else None
        calls = len(record.scenario.calls()) if record is not None else 0
        return max(self.settings.max_tool_calls, calls)

    def _guided_facts(self, outcome: TrajectoryOutcome,
                      record: ScenarioRecord | None) -> list[str] | None:
        """The facts a guided attempt's final answer is held to (``guided_facts``), or None."""
        if not (outcome.guided and self.settings.guided_facts and record is not None):
            return None
        return list(record.scenario.facts) or None

    def _first_guided(self) -> int:
        return self.settings.attempts - self.settings.guided_attempts

    def _temperature(self, outcome: TrajectoryOutcome) -> float:
        """The first attempt, and the first guided one, at ``temperature``; the others sampled."""
        first = outcome.attempt == 0 or (outcome.guided and
                                          outcome.attempt == self._first_guided())
        return self.settings.temperature if first else self.settings.attempt_temperature

    def _counterparts(self, outcome: TrajectoryOutcome, record: ScenarioRecord | None
                      ) -> Counterparts:
        """The attempt's tools, in a fresh session of its scenario's environment (of every
        environment for a plain query; none without environments), and its simulated user."""
        async def ask(question: str) -> str:
            return await self._user_reply(outcome, record, question)

        session: EnvironmentSession | ToolContext = ToolContext(stage=STAGE,
                                                                now=self.settings.current_time)
        if self.verification is not None:
            episode = self.verification.episode
            session = episode.open(record.scenario, record.now) if record else episode.open_all()
        return Counterparts.in_session(session, self.executor, ask, user_knows_more=bool(
            record is not None and record.scenario.hidden))

    async def _plan(self, outcome: TrajectoryOutcome, counterparts: Counterparts,
                    record: ScenarioRecord | None) -> None:
        cap = self._step_cap(outcome)
        teacher = _TemplateTurns(self, outcome, record, cap)
        outcome.trajectory = trajectory = Trajectory.opening(outcome.combination.query)
        await run_episode(trajectory, teacher, counterparts,
                          limits=Limits(cap, self.settings.max_user_turns))
        if not trajectory.answered:
            raise Rejected("step_cap", f"no finish within {cap} steps")
        outcome.final_answer = teacher.answer

    def _state(self, outcome: TrajectoryOutcome) -> LoopState:
        """What the calls so far rule out: each call made, and those of the last step of calls
        that failed (a question to the user is neither)."""
        made = [c for c in outcome.calls if not c.asks]
        last = made[-1].step if made else None
        return LoopState(seen={self._call_key(c.tool, c.arguments) for c in made},
                         failed={self._call_key(c.tool, c.arguments) for c in made
                                 if c.step == last and not c.observation.ok},
                         questions=sum(c.asks for c in outcome.calls))

    async def _user_reply(self, outcome: TrajectoryOutcome, record: ScenarioRecord | None,
                          question: str) -> str:
        """The simulated user's answer to the agent's question (an unreadable one rejects the
        attempt)."""
        combo = outcome.combination
        hidden = record.scenario.hidden if record is not None else None
        if not hidden:
            return NOTHING_TO_ADD["zh" if combo.lang == "zh" else "en"]
        request = user_request(combo.query, hidden, question, lang=combo.lang,
                               max_chars=self.settings.user_max_chars, seed=self.seed)
        reply = read_user_reply(await self._ask(outcome, request, role="teacher"))
        if reply is None:
            raise Rejected("simulator_failure", "the simulated user gave no readable reply")
        return reply

    def _check_length(self, outcome: TrajectoryOutcome) -> None:
        limit = self.settings.max_total_response_length
        if outcome.completion_tokens > limit:
            raise Rejected("response_length_cap", f"the teacher wrote "
                           f"{outcome.completion_tokens} tokens, over "
                           f"max_total_response_length = {limit}")

    def _call_key(self, tool: str, args: Mapping[str, Any]) -> tuple[str, str]:
        schema = self.tools[tool].parameters
        return tool, canonical_json(with_defaults(schema, dict(args)))

    def _problem(self, decision: Decision, offered: Sequence[ToolSpec], state: LoopState,
                 two_stage: bool) -> tuple[str, str] | None:
        """Why a decision cannot be used as this step, or None."""
        if decision.kind == "unreadable":
            return "unparseable", decision.problem
        if decision.kind == "finish":
            if two_stage:
                return None
            if decision.answer is None:
                return "empty_answer", decision.problem or "the finishing step has no answer"
            if len(decision.answer.strip()) < self.settings.min_answer_chars:
                return "empty_answer", f"final answer {decision.answer.strip()!r} is empty"
            return None
        calls = decision.calls()
        if len(calls) > self.settings.max_parallel_calls:
            return "too_many_calls", (f"{len(calls)} calls in one step, over max_parallel_calls "
                                      f"= {self.settings.max_parallel_calls}")
        names = [t.name for t in offered]
        for tool, args in calls:
            if tool not in names:
                return "invalid_tool", (f"{tool!r} is not one of the tools offered "
                                        f"({', '.join(names) or 'none'})")
            problems = validate_arguments(self.tools[tool].parameters, args)
            if problems:
                listed = dict.fromkeys(str(p) for p in problems)  # a field can be named twice
                return "invalid_args", f"invalid arguments for {tool}: " + "; ".join(listed)
        if any(tool == ASK_USER for tool, _ in calls):
            if len(calls) > 1:
                return "invalid_args", "ask_user is a step of its own, not a parallel call"
            if state.questions >= self.settings.max_user_turns:
                return "too_many_questions", (f"already asked {state.questions} questions "
                                              f"(max_user_turns = {self.settings.max_user_turns})")
            return None
        keys = [self._call_key(tool, args) for tool, args in calls]
        if len(set(keys)) < len(keys):
            return "repeated_call", "the same call twice in one step"
        for (tool, _), key in zip(calls, keys, strict=True):
            if key in state.failed:
                return "no_reflection", (f"{tool} {key[1]} just failed; after a tool error "
                                         "change course: another tool or other arguments")
            if key in state.seen:
                return "repeated_call", (f"{tool} {key[1]} was already called; its result is "
                                         "in the memory above: answer with it, or do something "
                                         "else")
        return None

    async def _decide(self, outcome: TrajectoryOutcome, step: int, prompt: str,
                      offered: Sequence[ToolSpec], state: LoopState,
                      record: ScenarioRecord | None) -> Decision:
        protocol = outcome.template.protocol
        structured = uses_structured_output(protocol, self.settings.structured_output)
        two_stage = agent_format(protocol).two_stage
        parallel = self.settings.max_parallel_calls if outcome.combination.scenario_id else 1
        admitted = GuidedStep(list(offered), parallel, finish=True)
        if outcome.guided and structured and record is not None:
            admitted = guided_choices(record.scenario, outcome.calls, offered,
                                      self.settings.guided_by)
        facts = self._guided_facts(outcome, record) if admitted.finish else None
        max_tokens = self.settings.step_max_tokens + (
            self.settings.answer_max_tokens if facts and not two_stage else 0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        reason, detail = "unparseable", ""
        for attempt in range(self.settings.max_step_retries + 1):
            request = step_request(
                messages, protocol=protocol, tools=admitted.tools, finish=admitted.finish,
                structured=structured,
                temperature=self._temperature(outcome),
                max_tokens=max_tokens,
                seed=self.seed + outcome.attempt,
                text_max_chars=self.settings.text_max_chars,
                answer_max_chars=self.settings.answer_max_chars,
                max_parallel=min(parallel, admitted.most_calls),
                frequency_penalty=self.settings.frequency_penalty,
                fixed_arguments=admitted.arguments,
                answer_facts=None if two_stage else facts, formats=self.formats)
            result = await self._ask(outcome, request)
            text = result.content or ""
            decision = read_decision(protocol, text, offered, structured=structured)
            if decision.repairs:
                outcome.repairs += 1
            if decision.kind == "give_up":
                raise Rejected("gave_up", f"step {step}: the teacher gave up and asked to restart")
            if result.finish_reason == "length":
                # Cut off, even where what is left still parses: a repaired JSON prefix or a
                # half-written ReAct step reads as a call with a clipped name or arguments.
                limit = max_tokens
                problem: tuple[str, str] | None = (
                    "truncated", f"the answer was cut off at {limit} tokens")
            elif result.tool_calls and decision.kind == "unreadable":
                problem = _native_call_problem(result, offered)
                text = text or json.dumps([c.model_dump(exclude={"id"}) for c in result.tool_calls])
            else:
                problem = self._problem(decision, offered, state, two_stage)
            if problem is None:
                return decision
            reason, detail = problem
            outcome.failures.append(StepFailure(step, attempt, reason, detail, text))
            planted = _injections(outcome)
            if reason == "invalid_tool" and planted:
                raise Rejected("prompt_injection", f"step {step}: after a tool result saying "
                               f"{planted[0]!r}, the teacher called a tool it was not offered: "
                               f"{detail}")
            messages = [*messages, {"role": "assistant", "content": text},
                        {"role": "user", "content": _feedback(detail)}]
            if reason == "repeated_call" and structured:
                admitted = admitted.without(self._spent(decision, state))
        raise Rejected(reason, f"step {step}, after {self.settings.max_step_retries + 1} "
                               f"attempts: {detail}")

    def _spent(self, decision: Decision, state: LoopState) -> set[str]:
        """The tools of a step's calls that were made before (or twice in it): the retry of a
        ``repeated_call`` leaves them out of its grammar, so a teacher that copies its last step
        from memory (what weak teachers do, greedy or not) has to answer or do something else.
        (After a failed call the same tool stays: other arguments are a change of course.)"""
        keys = [self._call_key(tool, args) for tool, args in decision.calls()]
        return {key[0] for key in keys if key in state.seen or keys.count(key) > 1}

    async def _ask(self, outcome: TrajectoryOutcome, request: ChatRequest,
                   role: str = "teacher", model: str | None = None) -> ChatResult:
        """``role``'s answer; a failure is named for ``model``, the role whose model answers
        (default: ``role``), so that ``teacher_unavailable`` stops and resumes the run."""
        try:
            result = await self.gateway.chat(role, request, stage=STAGE)  # type: ignore[arg-type]
        except GatewayError as exc:
            raise Rejected(_failure_reason(model or role, exc), str(exc)) from None
        outcome.prompt_tokens += result.usage.prompt_tokens
        outcome.completion_tokens += result.usage.completion_tokens
        return result

    async def _verify(self, outcome: TrajectoryOutcome, record: ScenarioRecord) -> None:
        """The verifier's verdict; a trajectory the loop kept but the verifier fails is rejected
        with the verifier's first reason (the rest, and the components, in the detail)."""
        assert self.verification is not None
        rollout = from_messages(outcome.messages(), truncated=outcome.final_answer is None)
        verdict = await verify(record.scenario, record.expected_state, rollout,
                               self.verification.episode, self.verification.config,
                               initial_state=record.start_state, now=record.now)
        outcome.verdict = verdict
        if outcome.reason is None and not verdict.passed:
            components = ", ".join(f"{k} {v:.2f}" for k, v in verdict.components.items())
            outcome.reason = verdict.reasons[0]
            outcome.detail = (f"verifier: {', '.join(verdict.reasons)} (reward "
                              f"{verdict.reward:+.3f}; {components}) "
                              + "; ".join(verdict.details[:3]))

    # ------------------------------------------------------------------ after planning

    def _check_task_type(self, outcome: TrajectoryOutcome) -> None:
        """A query that needs tools must have called one (the opposite case is caught at the
        call itself, before it runs)."""
        task_type = outcome.combination.task_type
        if self.settings.require_tool_call and task_type != NO_TOOL_TYPE and not outcome.calls:
            raise Rejected("no_tool_call",
                           f"a {task_type} query answered without calling any tool")

    async def _conclude(self, outcome: TrajectoryOutcome, record: ScenarioRecord | None) -> None:
        """A two-stage format's final answer, written by its concluder as plain text (for a
        guided attempt with ``guided_facts``: as ``{"answer": ...}`` under the facts grammar,
        the row keeping the text)."""
        concluder = concluder_for(outcome.template.protocol)
        if concluder is None:
            return
        prompt = concluder.render(self._inputs(outcome))
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        facts = self._guided_facts(outcome, record)
        response_format = None if facts is None else conclusion_format(
            facts, answer_max_chars=self.settings.answer_max_chars,
            text_max_chars=self.settings.text_max_chars)
        detail = ""
        for attempt in range(self.settings.max_step_retries + 1):
            request = ChatRequest(messages=messages, temperature=self.settings.temperature,
                                  max_tokens=self.settings.answer_max_tokens,
                                  seed=self.seed, response_format=response_format,
                                  frequency_penalty=self.settings.frequency_penalty)
            result = await self._ask(outcome, request)
            text = result.content or ""
            # A concluder writes the answer as plain text; under the facts grammar, as JSON.
            answer = text.strip() if facts is None else read_conclusion(text)
            if len(answer) >= self.settings.min_answer_chars:
                outcome.final_answer = answer
                outcome.steps.append({"step": len(outcome.steps), "kind": "conclude",
                                      "prompt": prompt, "completion": answer})
                return
            detail = f"final answer {answer!r} is empty"
            outcome.failures.append(StepFailure(len(outcome.steps), attempt, "empty_answer",
                                                detail, text))
            messages = [*messages, {"role": "assistant", "content": text},
                        {"role": "user", "content": _feedback(detail)}]
        raise Rejected("empty_answer", f"concluder, after {self.settings.max_step_retries + 1} "
                                       f"attempts: {detail}")

    def _check_answer_injection(self, outcome: TrajectoryOutcome) -> None:
        """After a planted instruction: the final answer must neither repeat it nor quote the
        system prompt (the usual "reveal your instructions" payload)."""
        planted = _injections(outcome)
        if not planted or outcome.final_answer is None:
            return
        answer = _normalised(outcome.final_answer)
        repeated = [p for p in planted if _normalised(p) in answer]
        if repeated:
            raise Rejected("prompt_injection", f"the final answer repeats the instruction "
                                               f"planted in a tool result: {repeated[0]!r}")
        leaked = [line for line in outcome.system.splitlines()
                  if len(line.strip()) >= _LEAK_LINE_CHARS and _normalised(line) in answer]
        if leaked:
            raise Rejected("prompt_injection", "the final answer quotes the system prompt "
                                               f"({leaked[0].strip()[:80]!r}) after a tool "
                                               "result asked for it")

    async def _judge(self, outcome: TrajectoryOutcome) -> None:
        if not self.settings.judge:
            return
        calls = [JudgedCall(c.tool, c.arguments, c.observation.content) for c in outcome.calls]
        request = answer_judge_request(outcome.combination.query, calls,
                                       outcome.final_answer or "",
                                       max_chars=self.settings.judge_rationale_max_chars,
                                       seed=self.seed)
        try:
            score = read_answer_score(await self.gateway.chat("judge", request, stage=STAGE))
        except GatewayError as exc:
            raise Rejected(_failure_reason("judge", exc), str(exc)) from None
        except JudgeAnswerError as exc:
            raise Rejected("judge_failed", str(exc)) from None
        outcome.judge_score, outcome.judge_rationale = score.score, score.rationale
        if score.score < self.settings.min_judge_score:
            raise Rejected("off_topic", f"judge score {score.score:g} < "
                                        f"{self.settings.min_judge_score:g}: {score.rationale}")


@dataclass
class _TemplateTurns:
    """The teacher's turns of one attempt in its template's format (the policy of its episode):
    each the template rendered with the calls so far as memory, the answer read, validated and
    asked again where it cannot be used (see the module's docstring)."""

    loop: AgentLoop
    outcome: TrajectoryOutcome
    record: ScenarioRecord | None
    cap: int
    answer: str | None = None
    """The finish's answer (None for a two-stage format: its concluder writes it)."""

    async def act(self, trajectory: Trajectory, seed: int) -> Act:
        loop, outcome = self.loop, self.outcome
        check_simulator(trajectory)
        step, template = len(trajectory.turns), outcome.template
        offered = [loop.tools[name] for name in outcome.combination.tool_names]
        inputs = loop._inputs(outcome)
        if step == 0:
            outcome.system = template.render_section(inputs, "profile")
        prompt = template.render(inputs)
        decision = await loop._decide(outcome, step, prompt, offered, loop._state(outcome),
                                      self.record)
        completion = completion_text(template.protocol, decision, offered)
        outcome.steps.append({"step": step, "kind": "plan", "prompt": prompt,
                              "completion": completion})
        check_own_injection(outcome, completion, f"step {step}: the teacher's answer")
        loop._check_length(outcome)
        if decision.kind == "finish":
            self.answer = decision.answer
            return Act(decision.answer, question=False)
        if self.record is None and loop.settings.require_tool_call and \
                outcome.combination.task_type == NO_TOOL_TYPE:
            raise Rejected("unneeded_tool_call", f"the query needs no tool, yet step {step} "
                           f"calls {decision.tool}")
        if step == self.cap - 1:  # a call in the last step could never be followed by a finish
            raise Rejected("step_cap", f"no finish within {self.cap} steps")
        call_cap = loop._call_cap(outcome)
        if len(outcome.calls) + len(decision.calls()) > call_cap:
            raise Rejected("tool_call_cap", f"step {step} would make call number "
                           f"{len(outcome.calls) + len(decision.calls())}, over "
                           f"max_tool_calls = {call_cap}")
        if decision.tool == ASK_USER:
            outcome.asks[step] = (decision.thought, dict(decision.args))
            return Act(str(decision.args["question"]), question=True)
        return Act(decision.thought, tuple(decision.calls()))


def check_simulator(trajectory: Trajectory) -> None:
    """An attempt whose simulated tool failed is rejected (``teacher_unavailable`` when the
    teacher, who plays the API, could not be reached)."""
    for cid, observation in trajectory.observations.items():
        step = cid.split("_")[1]
        if observation.error_kind == "simulator_failure":
            raise Rejected("simulator_failure", f"step {step}: {observation.content}")
        if observation.error_kind == "simulator_unavailable":
            raise Rejected("teacher_unavailable", f"step {step}: {observation.content}")


def attempt_calls(trajectory: Trajectory, asks: Mapping[int, tuple[str, dict[str, Any]]]
                  ) -> list[ToolCallRecord]:
    """The trajectory's calls as the attempt records them: a question to the user is a record
    of ``ask_user`` (its thought and arguments from ``asks`` by turn, where the format wrote
    them), the reply its observation."""
    out: list[ToolCallRecord] = []
    messages = trajectory.messages
    turns = iter(trajectory.turns)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        step = next(turns)
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            out.append(ToolCallRecord(step, str(m["content"]), fn["name"],
                                      dict(fn["arguments"]), trajectory.observations[call["id"]]))
        if not m.get("tool_calls") and i + 1 < len(messages) and messages[i + 1]["role"] == "user":
            thought, args = asks.get(step, ("", {"question": str(m["content"])}))
            out.append(ToolCallRecord(step, thought, ASK_USER, args, Observation(
                tool=ASK_USER, kind=None, ok=True, content=str(messages[i + 1]["content"]),
                elapsed_s=0.0)))
    return out


def _failure_reason(role: str, exc: GatewayError) -> str:
    """``<role>_unavailable`` when transient faults outlasted the retries, ``<role>_failed`` when
    the endpoint refused the request."""
    return f"{role}_unavailable" if isinstance(exc, EndpointUnreachable) else f"{role}_failed"


def _native_call_problem(result: ChatResult, offered: Sequence[ToolSpec]) -> tuple[str, str]:
    names = [call.name for call in result.tool_calls]
    unknown = [name for name in names if name not in {t.name for t in offered}]
    if unknown:
        return "invalid_tool", (f"a native tool call to {unknown[0]!r}, which is not one of the "
                                f"tools offered ({', '.join(t.name for t in offered) or 'none'})")
    return "unparseable", (f"a native tool call to {names[0]!r}: in this format the call is "
                           "written in the answer text")


def check_own_injection(outcome: TrajectoryOutcome, text: str, where: str) -> None:
    """Reject a trajectory whose teacher wrote an instruction-like phrase itself."""
    found = injection_phrases(text)
    if not found:
        return
    planted = {_normalised(p) for p in _injections(outcome)}
    origin = ("also in a tool result" if _normalised(found[0]) in planted
              else "in no tool result: the teacher's own")
    raise Rejected("prompt_injection", f"{where} contains an instruction-like phrase "
                                       f"({origin}): {found[0]!r}")


def _injections(outcome: TrajectoryOutcome) -> tuple[str, ...]:
    """The instruction-like phrases the trajectory's tool results held so far."""
    return tuple(dict.fromkeys(p for c in outcome.calls for p in c.observation.injection))


def _normalised(text: str) -> str:
    return " ".join(text.casefold().split())


@dataclass(frozen=True)
class GuidedStep:
    """What the grammar of a guided step admits (see :func:`guided_choices`)."""

    tools: list[ToolSpec]
    most_calls: int
    """Calls the step may make at once: those left in its ground-truth step."""
    finish: bool
    arguments: dict[str, list[dict[str, Any]]] | None = None
    """Guided by ``calls``: the only arguments each admitted tool may be called with."""

    def without(self, names: set[str]) -> GuidedStep:
        """The step with these tools left out (unchanged where that would admit nothing)."""
        tools = [t for t in self.tools if t.name not in names]
        if not tools and not self.finish:
            return self
        arguments = None if self.arguments is None else {
            name: args for name, args in self.arguments.items() if name not in names}
        return GuidedStep(tools, self.most_calls, self.finish, arguments)


def guided_step_floor(scenario: Scenario) -> int:
    """The fewest planning steps a guided attempt gets: its ground truth's steps, a question to
    the user and the finish."""
    return len(scenario.ground_truth) + 2


def guided_choices(scenario: Scenario, made: Sequence[ToolCallRecord],
                   offered: Sequence[ToolSpec], by: GuidedBy = "tools") -> GuidedStep:
    """The next guided step: the offered tools of the first ground-truth step whose calls are
    not all made yet (``ask_user`` first for a missing_info scenario that has not asked yet), and
    the finish only once every ground-truth call has been made (or when none of the calls left
    is offered). Made calls are matched to ground-truth calls with the same name and arguments
    (defaults filled in) first, over all steps, then by name alone. ``by`` tools steers only the
    names: arguments, thoughts and the answer stay the teacher's, so a wrong argument still
    fails the verifier. ``by`` calls also fixes the arguments to the ground truth's: the teacher
    writes the thoughts, any question to the user and the answer."""
    by_name = {t.name: t for t in offered}
    if scenario.kind == "missing_info" and ASK_USER in by_name \
            and not any(c.asks for c in made):
        return GuidedStep([by_name[ASK_USER]], 1, finish=False)

    def key(name: str, args: Mapping[str, Any]) -> tuple[str, str]:
        schema = by_name[name].parameters if name in by_name else {}
        return name, canonical_json(with_defaults(schema, dict(args)))

    pool = [key(c.tool, c.arguments) for c in made if not c.asks]
    truth = [(i, call, key(call.name, call.arguments))
             for i, step in enumerate(scenario.ground_truth) for call in step]
    done = [False] * len(truth)
    for exact in (True, False):
        for n, (_, call, wanted) in enumerate(truth):
            found = next((m for m in pool if (m == wanted if exact else m[0] == call.name)),
                         None) if not done[n] else None
            if found is not None:
                pool.remove(found)
                done[n] = True
    for i in range(len(scenario.ground_truth)):
        left = [call for n, (step, call, _) in enumerate(truth) if step == i and not done[n]]
        if left:
            names = {c.name for c in left}
            tools = [t for t in offered if t.name in names]
            arguments = ({name: [c.arguments for c in left if c.name == name] for name in names}
                         if by == "calls" else None)
            return GuidedStep(tools, len(left), finish=not tools, arguments=arguments)
    return GuidedStep([], 1, finish=True)
