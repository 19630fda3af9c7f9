"""Scenarios: a request in an environment, with a ground truth that was executed.

A scenario is a user request (zh or en), the environment it happens in and the state it starts
from, the ground-truth actions (steps of calls; the calls of one step are independent and may run
in parallel), the facts a final answer must state, and, for a request that lacks something, what
the user answers when asked. Its kind says what a good agent does:

- ``single_call``: one call; ``parallel_calls``: independent calls, at least one step with two or
  more; ``multi_step``: two or more steps, a result feeding the next call;
- ``no_tool``: answer directly, no call; ``irrelevant``: no offered tool fits, say so;
- ``missing_info``: ask the user first (``hidden`` is the answer), then act.

Scenarios come from a seed file the user writes (YAML or JSON, a list under ``scenarios``), from
the teacher, and from the environments' task recipes in sampled worlds (``source: generated``,
see :mod:`agentune.tasks.environments.blueprints`). Each is checked against the environments (known environment, known tools,
schema-valid arguments, a consistent kind) with errors that name the file, the row and the field,
then its ground truth runs in a fresh session: the end state becomes ``expected_state``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.catalog import EnvironmentCatalog, read_document
from agentune.tasks.environments.state import states_equal
from agentune.tasks.tools.arguments import validate_arguments

ScenarioKind = Literal["single_call", "parallel_calls", "multi_step", "no_tool", "irrelevant",
                       "missing_info"]
KINDS: tuple[str, ...] = get_args(ScenarioKind)
CALLING_KINDS = frozenset({"single_call", "parallel_calls", "multi_step", "missing_info"})
"""Kinds whose ground truth calls tools."""
DECLINING_KINDS = frozenset({"irrelevant", "no_tool"})
"""Kinds where calling any tool is wrong: the right answer declines or answers unaided."""


class Call(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Scenario(BaseModel):
    """One scenario as written (the executed fields are added by :func:`execute_ground_truth`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128)
    environment: str
    lang: Literal["zh", "en"]
    kind: ScenarioKind
    request: str = Field(min_length=1)
    initial_state: dict[str, Any] = Field(
        default_factory=dict, description="Top-level state entries of the environment the "
        "scenario sets; the rest keep the environment's defaults.")
    ground_truth: list[list[Call]] = Field(
        default_factory=list, description="Steps of calls; a step's calls are independent.")
    facts: list[str] = Field(default_factory=list,
                             description="What the final answer must state.")
    hidden: str | None = Field(None, description="What the user answers when asked "
                               "(missing_info).")
    family: str | None = Field(None, description="Scenarios written as variants of one task "
                               "share a family; splits keep a family together. Default: the id.")
    source: Literal["seed", "teacher", "generated"] = "seed"
    blueprint: dict[str, Any] | None = Field(
        None, description="A generated scenario's origin: its recipe, phrasing family, world "
        "seed and slots (see blueprints.py); null for a written one.")

    def calls(self) -> list[Call]:
        return [c for step in self.ground_truth for c in step]

    def group(self) -> str:
        return self.family or self.id


# --------------------------------------------------------------------------- checking


def kind_problem(s: Scenario) -> tuple[str, str] | None:
    """(field, problem) when the ground truth does not fit the kind."""
    steps, calls = len(s.ground_truth), len(s.calls())
    if s.kind in ("no_tool", "irrelevant"):
        return ("ground_truth", f"a {s.kind} scenario calls no tool") if calls else None
    if any(not step for step in s.ground_truth):
        return "ground_truth", "a step with no call"
    if s.kind == "single_call" and (steps, calls) != (1, 1):
        return "ground_truth", f"single_call needs exactly one call, got {calls} in {steps} steps"
    if s.kind == "parallel_calls" and not any(len(step) > 1 for step in s.ground_truth):
        return "ground_truth", "parallel_calls needs a step with two or more calls"
    if s.kind == "multi_step" and steps < 2:
        return "ground_truth", "multi_step needs two or more steps"
    if s.kind == "missing_info":
        if not s.hidden:
            return "hidden", "missing_info needs what the user answers when asked"
        if not calls:
            return "ground_truth", "missing_info needs the calls made once the user answered"
    if s.kind != "missing_info" and s.hidden:
        return "hidden", f"only missing_info scenarios have a hidden answer, not {s.kind}"
    return None


def check_scenario(s: Scenario, catalog: EnvironmentCatalog, *, file: str | Path,
                   where: str) -> None:
    """Errors name the file, the row and the field."""
    if s.environment not in catalog.environments:
        raise InputError(file, where, "environment", f"unknown environment {s.environment!r}; "
                         f"known: {sorted(catalog.environments)}")
    problem = kind_problem(s)
    if problem:
        raise InputError(file, where, problem[0], problem[1])
    offered = {t.name: t for t in catalog.offered_tools(s.environment)}
    stateful = {spec.name for spec in catalog.offered(s.environment) if spec.stateful}
    for name in s.initial_state:
        if name not in stateful:
            raise InputError(file, where, f"initial_state.{name}",
                             f"not a stateful environment of this scenario: {sorted(stateful)}")
        if not isinstance(s.initial_state[name], dict):
            raise InputError(file, where, f"initial_state.{name}", "must be a JSON object")
    for i, step in enumerate(s.ground_truth):
        for j, call in enumerate(step):
            at = f"ground_truth[{i}][{j}]"
            if call.name not in offered:
                raise InputError(file, where, f"{at}.name", f"unknown tool {call.name!r} in "
                                 f"environment {s.environment!r}")
            bad = validate_arguments(offered[call.name].parameters, call.arguments)
            if bad:
                raise InputError(file, where, f"{at}.arguments", "; ".join(map(str, bad)))
    try:
        json.dumps(s.initial_state, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(file, where, "initial_state", f"not JSON: {exc} (quote dates and "
                         "times in YAML)") from None


def load_scenarios(path: str | Path, catalog: EnvironmentCatalog) -> list[Scenario]:
    """Read and check a scenario seed file; ids must be unique."""
    path = Path(path)
    data = read_document(path)
    rows = data.get("scenarios") if isinstance(data, Mapping) else data
    if not isinstance(rows, list) or not rows:
        raise InputError(path, None, "scenarios", "must be a non-empty list of scenarios")
    out: list[Scenario] = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(rows):
        where = f"scenario {i}"
        try:
            scenario = Scenario.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field_name = ".".join(str(p) for p in err["loc"]) or None
            raise InputError(path, where, field_name, err["msg"]) from None
        if scenario.id in seen:
            raise InputError(path, where, "id", f"duplicate id {scenario.id!r} (first at "
                             f"{seen[scenario.id]})")
        seen[scenario.id] = where
        check_scenario(scenario, catalog, file=path, where=where)
        out.append(scenario)
    return out


# --------------------------------------------------------------------------- splits


SPLITS = ("train", "heldout", "dev", "reserved", "natural")
"""Scenario splits. Only ``train`` is ever trained on; ``natural`` holds the written scenarios of
the training environments when scenarios are generated (they measure transfer to real
requests); ``dev`` (generated on request) is for choosing a recipe without looking at the
others."""


def assign_split(scenario: Scenario, catalog: EnvironmentCatalog, *, heldout_fraction: float,
                 seed: int, natural: bool = False
                 ) -> Literal["train", "heldout", "reserved", "natural"]:
    """``reserved``: its environment is kept for evaluation; ``natural`` (with ``natural``: the
    scenarios are generated, and the written ones only evaluate); else a seeded draw per family
    (all variants of one task land on the same side)."""
    if catalog.environments[scenario.environment].reserved:
        return "reserved"
    if natural:
        return "natural"
    digest = hashlib.sha256(f"{seed}:{scenario.environment}:{scenario.group()}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") / 2**64 < heldout_fraction else "train"


# --------------------------------------------------------------------------- the artifact


@dataclass(frozen=True)
class ScenarioRecord:
    """A published scenario: as written, its split, its clock, and where its ground truth starts
    and ends."""

    scenario: Scenario
    split: str
    now: dt.datetime
    start_state: dict[str, Any]
    expected_state: dict[str, Any]


def scenario_row(scenario: Scenario, split: str, now: dt.datetime, run: GroundTruthRun,
                 verifier_version: str) -> dict[str, Any]:
    return {**scenario.model_dump(mode="json"), "split": split, "now": now.isoformat(),
            "start_state": run.initial_state,
            "expected_state": run.expected_state, "ground_truth_results": run.results,
            "verifier_version": verifier_version}


def _cell(value: Any) -> Any:
    """A cell as pandas gives it (NaN for a missing string, an array for a list) made plain."""
    if isinstance(value, float) and value != value:
        return None
    return value.tolist() if hasattr(value, "tolist") else value


def read_scenario_rows(rows: Sequence[Mapping[str, Any]], where: str) -> list[ScenarioRecord]:
    """``scenarios`` rows (Json columns decoded) back into records; a bad row names its row."""
    fields = set(Scenario.model_fields)
    out = []
    for i, row in enumerate(rows):
        values = {k: _cell(v) for k, v in row.items() if k in fields}
        try:
            scenario = Scenario.model_validate({k: v for k, v in values.items() if v is not None})
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(where, f"row {i}", ".".join(map(str, err["loc"])) or None,
                             err["msg"]) from None
        out.append(ScenarioRecord(scenario, str(row.get("split") or "train"),
                                  dt.datetime.fromisoformat(str(row["now"])),
                                  dict(row.get("start_state") or {}),
                                  dict(row.get("expected_state") or {})))
    return out


# --------------------------------------------------------------------------- execution


@dataclass
class GroundTruthRun:
    """What running a scenario's ground truth gave: each call's result, the end state."""

    results: list[list[Any]] = field(default_factory=list)
    initial_state: dict[str, Any] = field(default_factory=dict)
    expected_state: dict[str, Any] = field(default_factory=dict)
    problem: tuple[str, str] | None = None
    """(reason, detail) when the ground truth cannot stand: an error, no change where one is
    expected."""


def expects_change(s: Scenario, catalog: EnvironmentCatalog) -> bool:
    return any(call.name in catalog.owner(call.name).writes for call in s.calls())


def generated_paths(catalog: EnvironmentCatalog, environment: str) -> dict[str, tuple[str, ...]]:
    return {spec.name: spec.generated for spec in catalog.offered(environment)}


def state_unchanged(before: Mapping[str, Any], after: Mapping[str, Any],
                    generated: Mapping[str, Sequence[str]]) -> bool:
    return all(states_equal(before.get(env), after.get(env), generated.get(env, ()))
               for env in set(before) | set(after))
