"""Executable tool environments: a named set of tools with shared state.

An environment is a Python class. Its public methods are its tools: type hints and a Google-style
docstring (an ``Args:`` entry per parameter) give each tool's OpenAI schema through transformers'
``get_json_schema``. ``reset(**initial_state)`` loads a scenario's state and ``state()`` returns a
JSON snapshot of it. This is the shape TRL's ``GRPOTrainer(environment_factory=...)`` expects of an
environment class, so one class serves synthesis, verification, evaluation and RL.

A tool reports a failure the agent should see (an unknown id, a full room) by raising
:class:`ToolError`; anything else it raises is a bug in the environment and is reported as such.
Values a tool makes up (ids, timestamps) are declared with :func:`generates`, as paths into the
state, so that comparing end states ignores them.

::

    class Calendar(Environment):
        name = "calendar"
        description = {"en": "Meeting rooms and meetings.", "zh": "会议室与会议。"}

        def reset(self, **state):
            self.rooms = state.get("rooms", [])
            self.meetings = state.get("meetings", [])

        def state(self):
            return {"rooms": self.rooms, "meetings": self.meetings}

        @generates("meetings.*.id")
        def book_room(self, room: str, date: str) -> dict:
            '''Book a room for a day.

            Args:
                room: The room's id.
                date: The day, YYYY-MM-DD.
            '''
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

RESERVED_METHODS = frozenset({"reset", "state", "sample_state"})
"""Public methods of an environment that are not tools (``sample_state(rng)``, optional, is a
classmethod returning a whole new world: see :mod:`agentune.tasks.environments.blueprints`)."""


class ToolError(Exception):
    """A failure the agent sees as the tool's answer (``{"error": message}``), e.g. "no such
    order". The environment's state must be unchanged when a tool raises it."""


class Environment:
    """Base class of Python environments (see the module docstring).

    ``name`` is how the environment file, scenarios and reports refer to it; ``description`` maps a
    language code (``en``, ``zh``) to a sentence about the world it models.
    """

    name: ClassVar[str] = ""
    description: ClassVar[dict[str, str]] = {}

    def reset(self, **initial_state: Any) -> None:
        """Load a scenario's state; keys the scenario leaves out take the environment's defaults."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """A JSON snapshot of the state (a deep copy: later calls must not change it)."""
        raise NotImplementedError


def writes(method: F) -> F:
    """Mark a tool that changes the state (a booking, a cancellation). A scenario whose ground
    truth calls one must end in a different state, and verification reads a repeated call of a
    tool without this mark as redundant."""
    method.__agentune_writes__ = True  # type: ignore[attr-defined]
    return method


def generates(*paths: str) -> Callable[[F], F]:
    """Mark a tool that writes and fills the state ``paths`` with made-up values (ids,
    timestamps): ``"orders.*.id"`` (``*`` matches every list item or dict key). End-state
    comparison ignores them."""

    def mark(method: F) -> F:
        method.__agentune_generates__ = tuple(paths)  # type: ignore[attr-defined]
        return writes(method)

    return mark


def tool_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The tools of an environment class: its public methods except ``reset`` and ``state``, in
    the order the class (and its bases) define them."""
    methods: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, Environment):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in RESERVED_METHODS:
                continue
            if inspect.isfunction(member):
                methods[name] = member
    return methods


def generated_paths(cls: type) -> tuple[str, ...]:
    """Every state path the class's tools declare with :func:`generates`."""
    return tuple(dict.fromkeys(p for method in tool_methods(cls).values()
                               for p in getattr(method, "__agentune_generates__", ())))


def writing_tools(cls: type) -> frozenset[str]:
    """The tools of the class marked with :func:`writes` (or :func:`generates`)."""
    return frozenset(name for name, method in tool_methods(cls).items()
                     if getattr(method, "__agentune_writes__", False))


def snapshot(value: Any) -> Any:
    """A deep copy of JSON-like state, so a snapshot does not change with the environment.

    A pickle round trip: for dicts, lists and scalars the same copy as ``copy.deepcopy`` at about
    a fifth of its time (58 vs 12 us for the travel world's 2.5 KB state), which counts because
    every tool call snapshots its environment for rollback and every episode copies whole worlds
    (synthesis, the verifier's replay, the closed loop and GRPO all open sessions)."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
