"""The episode runner: one policy acting in one scenario's environment, turn by turn, with the
simulated user, recorded as one :class:`Trajectory` (OpenAI messages).

Every rollout of agentune goes through :func:`run_episode`: the teacher's in synthesis (the
messages form: its unguided and guided policies), the model under test's in the closed loop, the
student's samples of build_preferences; GRPO's environment (TRL drives its turns) answers each
call with the same :func:`answer_call`. A turn is the policy's :class:`Act`:

- calls (``(name, arguments)``, run in the scenario's session, concurrently; a call of
  ``ask_user`` is answered by the user as its tool result), or
- text: a question when the policy says so (``Act.question``), or, when it leaves that open, when
  the scenario holds information only the user has, nothing has been called yet and questions
  are left (``max_user_turns``); the user's reply is the next user message. Any other text is the
  final answer and ends the episode.

Turns are capped (``max_steps``); an episode that hits the cap, or whose policy could not be
asked (``Act.error``), ends unanswered. A policy stops an episode by raising (synthesis rejects
an attempt so): the trajectory is filled in place, so what was done until then stays readable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import Scenario, ScenarioRecord
from agentune.tasks.environments.session import EnvironmentSession
from agentune.tasks.rollouts.simulated_user import NOTHING_TO_ADD
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import Observation, ToolContext
from agentune.tasks.verifier.rollout import ASK_USER, Rollout, from_messages


@dataclass(frozen=True)
class Act:
    """One turn of a policy: its text and its calls (``(name, arguments)``, the arguments as the
    policy wrote them: a JSON string from a model, an object from a guide); ``error`` when the
    model could not be asked (the episode ends, unanswered)."""

    content: str | None = None
    calls: tuple[tuple[str, Any], ...] = ()
    error: str | None = None
    question: bool | None = None
    """For a text turn: True a question to the user, False the final answer, None by the rule
    (see the module's docstring)."""


@dataclass
class Trajectory:
    """The one trajectory type: the conversation as OpenAI messages (a call's arguments as the
    policy wrote them), what each call returned, and how it ended."""

    messages: list[dict[str, Any]]
    observations: dict[str, Observation] = field(default_factory=dict)
    """Each tool call's result by its id (calls of ``ask_user`` have none: a person answered)."""
    questions: int = 0
    answered: bool = False
    error: str | None = None

    @classmethod
    def opening(cls, request: str, system: str | None = None) -> Trajectory:
        """The conversation before the first turn: the system message (if any) and the request."""
        start = [{"role": "system", "content": system}] if system else []
        return cls([*start, {"role": "user", "content": request}])

    @property
    def turns(self) -> list[int]:
        """The turn of each assistant message, in order (one message a turn)."""
        return list(range(sum(m["role"] == "assistant" for m in self.messages)))

    @property
    def acted(self) -> bool:
        """Whether any tool has been called (``ask_user`` included)."""
        return any(m.get("tool_calls") for m in self.messages)

    def calls(self) -> int:
        return sum(len(m.get("tool_calls") or ()) for m in self.messages)

    def answer(self) -> str | None:
        return str(self.messages[-1]["content"]) if self.answered else None

    def rollout(self) -> Rollout:
        """The trajectory as the verifier reads it."""
        return from_messages(self.messages, truncated=not self.answered)


class Policy(Protocol):
    """How the acting model is asked for its next turn."""

    async def act(self, trajectory: Trajectory, seed: int) -> Act: ...


class User(Protocol):
    """The user of a scenario, answering the agent's questions."""

    async def reply(self, record: ScenarioRecord, question: str) -> str: ...


@dataclass(frozen=True)
class VerbatimUser:
    """A user who states what they know verbatim (the scenario's hidden information), with no
    model asked: GRPO's (no teacher runs beside the training)."""

    async def reply(self, record: ScenarioRecord, question: str) -> str:
        return record.scenario.hidden or nothing_to_add(record.scenario)


def nothing_to_add(scenario: Scenario) -> str:
    """The reply to a question in a scenario where the user knows nothing more."""
    return NOTHING_TO_ADD["zh" if scenario.lang == "zh" else "en"]


@dataclass(frozen=True)
class Counterparts:
    """Who answers the agent in one episode: its tools, run in one session, and its user."""

    run_tool: Callable[[str, Any], Awaitable[Observation]]
    ask_user: Callable[[str], Awaitable[str]]
    user_knows_more: bool
    """The user holds what the request lacks (a scenario's hidden information)."""

    @classmethod
    def of(cls, record: ScenarioRecord, episode: Episode, user: User) -> Counterparts:
        """A fresh session of ``record``'s environment, and ``user`` as its user: the wiring of
        every scenario episode."""
        session = episode.open(record.scenario, record.now)
        return cls.in_session(session, episode.executor,
                              lambda question: user.reply(record, question),
                              user_knows_more=bool(record.scenario.hidden))

    @classmethod
    def in_session(cls, session: EnvironmentSession | ToolContext, executor: ToolExecutor,
                   ask_user: Callable[[str], Awaitable[str]], *, user_knows_more: bool
                   ) -> Counterparts:
        """Tools run by ``executor`` in ``session`` (or with a bare context: a plain query's)."""
        def context() -> ToolContext:
            return session if isinstance(session, ToolContext) else session.context()

        async def run_tool(name: str, arguments: Any) -> Observation:
            return await executor.execute(name, arguments, context=context())

        return cls(run_tool, ask_user, user_knows_more)

    async def answer(self, name: str, arguments: Any) -> Observation | str:
        """One call answered: ``ask_user`` by the user (their reply), any other tool in the
        session (its observation; arguments that are not JSON answer ``invalid_arguments``, as
        any bad call does)."""
        args = arguments_of(arguments)
        if name == ASK_USER:
            question = args.get("question", arguments) if isinstance(args, Mapping) else arguments
            return await self.ask_user(str(question))
        return await self.run_tool(name, args)


@dataclass(frozen=True)
class Limits:
    max_steps: int
    """Turns of the policy."""
    max_user_turns: int
    """Questions the rule takes text for (a policy's explicit question is its own to limit)."""


async def run_episode(trajectory: Trajectory, policy: Policy, counterparts: Counterparts, *,
                      limits: Limits, seed: int = 0) -> Trajectory:
    """``policy`` acting from ``trajectory`` (:meth:`Trajectory.opening`), answered by
    ``counterparts``; the trajectory is filled in place and returned. Turn ``t`` is asked with
    ``seed + t``."""
    for turn in range(limits.max_steps):
        act = await policy.act(trajectory, seed + turn)
        if act.error is not None:
            trajectory.error = act.error
            break
        if act.calls:
            ids = call_ids(turn, len(act.calls))
            trajectory.messages.append({"role": "assistant", "content": act.content or "",
                                        "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, (name, args) in zip(ids, act.calls, strict=True)]})
            answers = await asyncio.gather(*(counterparts.answer(name, args)
                                             for name, args in act.calls))
            for cid, (name, _), answer in zip(ids, act.calls, answers, strict=True):
                content = answer
                if isinstance(answer, Observation):
                    trajectory.observations[cid] = answer
                    content = answer.content
                trajectory.messages.append({"role": "tool", "tool_call_id": cid, "name": name,
                                            "content": content})
            continue
        text = act.content or ""
        trajectory.messages.append({"role": "assistant", "content": text})
        asks = act.question if act.question is not None else (
            counterparts.user_knows_more and trajectory.questions < limits.max_user_turns
            and not trajectory.acted)
        if asks:
            trajectory.questions += 1
            trajectory.messages.append({"role": "user",
                                        "content": await counterparts.ask_user(text)})
            continue
        trajectory.answered = True
        break
    return trajectory


def arguments_of(raw: Any) -> Any:
    """A call's arguments decoded where they are a JSON string (left as they are otherwise)."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return raw


def call_ids(turn: int, calls: int) -> list[str]:
    """The ids of a turn's calls: ``call_<turn>``, or ``call_<turn>_<i>`` for parallel ones."""
    return [f"call_{turn}"] if calls == 1 else [f"call_{turn}_{i}" for i in range(calls)]
