"""The reward registry: named reward functions over (scenario, rollout), selected by config.

Every function is called as ``f(scenario=..., rollout=..., verdict=...) -> float``: the scenario
(or None where a row no longer has one), the rollout as the verifier read it (or None), and the
verifier's verdict of that rollout (its components, penalties, reward and pass). The built-ins
only read the verdict, so they cost nothing beyond the one verification:

- ``verifier`` (default): the verdict's reward, seed 004's weighted sum of task completion, tool
  accuracy, efficiency, timing and format, plus its penalties (``verifier.weights`` and
  ``verifier.penalties`` set them);
- ``state_match``: 1 when the end state equals the ground truth's, else 0;
- ``format``: the share of steps that parse and call an offered tool with valid arguments;
- ``outcome`` (also ``retool_reward``, seed 003's name): +1 when the task is done (end state and
  answer right, or the right question or decline), else -1: a pure outcome reward.

A user adds one by import path, ``package.module:function``. :class:`RewardModel` is the
configured weighted sum; :meth:`RewardModel.lineage` (each term's name, weight and version) goes
into the lineage of everything ranked or trained with it. A built-in's version is the verifier's
(this package's code and rules); an imported function's is the hash of its module's source, and
its ``__version__`` when it has one.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentune.config.verifier import RewardConfig, RewardTerm
from agentune.tasks.environments.scenarios import Scenario
from agentune.tasks.verifier import VERSION
from agentune.tasks.verifier.rollout import Rollout
from agentune.tasks.verifier.verify import Verdict

RewardFunction = Callable[..., float]
"""``f(*, scenario: Scenario | None, rollout: Rollout | None, verdict: Verdict) -> float``"""


def verifier_reward(*, scenario: Scenario | None, rollout: Rollout | None,
                    verdict: Verdict) -> float:
    """Seed 004's reward: the weighted components plus the penalties that apply."""
    return float(verdict.reward)


def state_match(*, scenario: Scenario | None, rollout: Rollout | None, verdict: Verdict) -> float:
    """1 when the end state equals the ground truth's (generated values aside), else 0."""
    return float(verdict.components["state"])


def format_only(*, scenario: Scenario | None, rollout: Rollout | None, verdict: Verdict) -> float:
    """The share of steps that parse and call an offered tool with schema-valid arguments."""
    return float(verdict.components["format_compliance"])


def outcome(*, scenario: Scenario | None, rollout: Rollout | None, verdict: Verdict) -> float:
    """Seed 003's rule reward (ReTool's): +1 for a task done, -1 otherwise."""
    done = verdict.components["task_completion"] >= 1.0 and \
        verdict.components["timing_quality"] >= 1.0
    return 1.0 if done else -1.0


BUILTIN: dict[str, RewardFunction] = {
    "verifier": verifier_reward,
    "state_match": state_match,
    "format": format_only,
    "outcome": outcome,
    "retool_reward": outcome,
}


class RewardError(ValueError):
    """A reward that cannot be used; the message names the term."""


@dataclass(frozen=True)
class NamedReward:
    name: str
    weight: float
    version: str
    function: RewardFunction = field(compare=False)

    def lineage(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "version": self.version}


def _imported(path: str) -> tuple[RewardFunction, str]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise RewardError(f"reward {path!r}: not a built-in ({', '.join(sorted(BUILTIN))}) "
                          "nor an import path `package.module:function`")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardError(f"reward {path!r}: cannot import {module_name!r}: {exc}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise RewardError(f"reward {path!r}: {module_name} has no function {attr!r}")
    parameters = inspect.signature(function).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    missing = {"scenario", "rollout", "verdict"} - set(parameters)
    if missing and not takes_all:
        raise RewardError(f"reward {path!r}: must accept the keyword arguments scenario, rollout "
                          f"and verdict (missing: {sorted(missing)})")
    source = inspect.getsourcefile(module)
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:12] if source else "nosource"
    declared = getattr(function, "__version__", None) or getattr(module, "__version__", None)
    return function, f"{declared}+{digest}" if declared else digest


def resolve(term: RewardTerm) -> NamedReward:
    if term.name in BUILTIN:
        return NamedReward(term.name, term.weight, VERSION, BUILTIN[term.name])
    function, version = _imported(term.name)
    return NamedReward(term.name, term.weight, version, function)


@dataclass(frozen=True)
class RewardScore:
    total: float
    terms: dict[str, float]
    """Each term's unweighted value, by name."""


@dataclass(frozen=True)
class RewardModel:
    """The configured reward: ``sum(weight * term)`` over its terms."""

    terms: tuple[NamedReward, ...]

    @classmethod
    def from_config(cls, config: RewardConfig) -> RewardModel:
        names = [t.name for t in config.functions]
        if len(set(names)) != len(names):
            raise RewardError(f"reward.functions names a function twice: {names}")
        return cls(tuple(resolve(t) for t in config.functions))

    def lineage(self) -> list[dict[str, Any]]:
        return [t.lineage() for t in self.terms]

    def score(self, verdict: Verdict, *, scenario: Scenario | None = None,
              rollout: Rollout | None = None) -> RewardScore:
        values = {}
        for term in self.terms:
            value = term.function(scenario=scenario, rollout=rollout, verdict=verdict)
            try:
                values[term.name] = float(value)
            except (TypeError, ValueError):
                raise RewardError(f"reward {term.name!r} returned {value!r}, not a number") from None
        total = sum(t.weight * values[t.name] for t in self.terms)
        return RewardScore(round(total, 6), values)


def verdict_of_row(row: Mapping[str, Any]) -> Verdict:
    """A verdict back from a stored row (``attempts``, ``eval_rollouts``): components,
    penalties, reward, pass and reasons as the verifier wrote them."""
    penalties = row.get("penalties") or {}
    reasons = row.get("verifier_reasons", row.get("reasons")) or []
    return Verdict(components={k: float(v) for k, v in dict(row["components"]).items()},
                   penalties={k: bool(v) for k, v in dict(penalties).items()},
                   reward=float(row["reward"]), passed=bool(row["passed"]),
                   reasons=list(reasons),
                   version=str(row.get("verifier_version") or VERSION))


def needs_rollout(model: RewardModel) -> bool:
    """Whether a term may read the scenario or rollout (an imported function may)."""
    return any(t.function not in BUILTIN.values() for t in model.terms)

