"""Which trajectories to synthesize: Query x Tools x Template combinations (MAT, seed 001 4.1).

Every sampled query gets one task type and is rendered under several kept planner templates; the
task types follow configurable weights (seed 004: tool selection 0.35, multi-step planning 0.30,
timing decision 0.20, tool retrieval 0.15) and decide the tools offered:

- ``tool_selection``: the query's candidate subset from collect_queries (the tools it needs plus
  hard and random distractors);
- ``multi_step_planning``: the same, for queries that need two tools or more;
- ``timing_decision``: queries that need no tool, offered their all-distractor subset: the right
  step is to finish at once;
- ``tool_retrieval``: the needed tools hidden in a large subset (``retrieval_tools``), half of
  the distractors the catalog's best BM25 matches for the query, half random.

Types are filled one query at a time, always the type furthest below its share, from pools that
hold the queries eligible for fewest types first (so the broad types do not use up the queries
the narrow ones need). A type with no eligible query gives its share to the others. Templates are
assigned least-used first, so use is balanced (and capped by ``max_uses_per_template``). All
draws come from generators seeded with the run seed: the same inputs give the same plan.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from agentune.config.synthesize import SynthesisConfig
from agentune.tasks.agent.prompt_templates import AgentTemplate, TemplateError, load_template
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.schemas import TASK_TYPES
from agentune.tasks.environments.scenarios import Scenario, ScenarioRecord
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval
from agentune.tasks.tool_retrieval.index import Retriever
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.verifier.rollout import ASK_USER


@dataclass(frozen=True)
class QueryInput:
    id: str
    text: str
    lang: str
    set_id: str
    tool_ids: tuple[str, ...]
    """Its candidate tool subset (needed tools and distractors)."""
    likely_tool_ids: tuple[str, ...]
    """The tools it needs; empty: it needs none."""


@dataclass(frozen=True)
class Combination:
    """One trajectory to synthesize."""

    id: str
    query_id: str
    set_id: str
    query: str
    lang: str
    task_type: str
    template_id: str
    tool_names: tuple[str, ...]
    """The tools offered, in the order the prompt lists them."""
    expected_tools: tuple[str, ...]
    """The tools the query needs (empty for timing_decision)."""
    scenario_id: str | None = None
    """The scenario it acts out (in its environment, verified), or None for a plain query."""
    kind: str | None = None
    """The scenario's kind (single_call, parallel_calls ...); None for a plain query."""


@dataclass(frozen=True)
class SynthesisInputs:
    queries: list[QueryInput]
    tools: dict[str, ToolSpec]
    """The published tool catalog: what plain-query combinations are offered."""
    templates: dict[str, AgentTemplate]
    """Kept planner templates by id."""
    scenarios: list[ScenarioRecord] = field(default_factory=list)
    scenario_tools: dict[str, ToolSpec] = field(default_factory=dict)
    """The tools of the training environments, and ``ask_user``: what scenarios are offered."""
    offered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Environment -> the tools a scenario there may be offered (its own, the shared ones,
    ``ask_user``)."""
    shared: frozenset[str] = frozenset()
    """The tools of the shared environments: beyond those a scenario's ground truth calls, it
    is offered at most ``distractor_tools`` of them (see :class:`ScenarioOffer`)."""
    retrieval: CandidateRetrieval = field(default_factory=CandidateRetrieval)
    """How a ``tool_retrieval`` combination's hard distractors are found (BM25 or hybrid)."""

    def all_tools(self) -> dict[str, ToolSpec]:
        return {**self.scenario_tools, **self.tools}


# --------------------------------------------------------------------------- reading inputs


def _text(row: Mapping[str, Any], name: str, where: str, index: int) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value:
        raise InputError(where, f"row {index}", name, "must be a non-empty string")
    return value


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if value is not None else ()


def read_catalog(frame: pd.DataFrame, where: str) -> dict[str, ToolSpec]:
    tools: dict[str, ToolSpec] = {}
    for i, row in enumerate(frame.to_dict("records")):
        name = _text(row, "name", where, i)
        if not isinstance(row.get("parameters"), dict):
            raise InputError(where, f"row {i}", "parameters", "must be a JSON object")
        tools[name] = ToolSpec(name, str(row.get("description") or ""), row["parameters"])
    if not tools:
        raise InputError(where, None, None, "the catalog has no tools")
    return tools


def read_queries(frame: pd.DataFrame, where: str,
                 tools: Mapping[str, ToolSpec]) -> list[QueryInput]:
    queries = []
    for i, row in enumerate(frame.to_dict("records")):
        query = QueryInput(
            id=_text(row, "id", where, i), text=_text(row, "text", where, i),
            lang=_text(row, "lang", where, i), set_id=_text(row, "set_id", where, i),
            tool_ids=_names(row.get("tool_ids")),
            likely_tool_ids=_names(row.get("likely_tool_ids")),
        )
        for column in ("tool_ids", "likely_tool_ids"):
            unknown = [t for t in getattr(query, column) if t not in tools]
            if unknown:
                raise InputError(where, f"row {i} (query {query.id})", column,
                                 f"{', '.join(unknown)} not in the tool catalog")
        queries.append(query)
    if not queries:
        raise InputError(where, None, None, "no queries")
    return queries


def read_templates(frame: pd.DataFrame, where: str) -> dict[str, AgentTemplate]:
    """The kept planner templates (benchmark and Meta-Agent), loaded and validated; those
    reserved for evaluation are left out: no training row is written in them."""
    templates: dict[str, AgentTemplate] = {}
    for i, row in enumerate(frame.to_dict("records")):
        if not row.get("kept") or row.get("kind") != "planner" or row.get("reserved") is True:
            continue
        tid = _text(row, "id", where, i)
        lang = row.get("lang") if row.get("lang") in ("zh", "en") else None
        try:
            templates[tid] = load_template(
                _text(row, "text", where, i), id=tid, protocol=_text(row, "protocol", where, i),
                kind="planner", source=row.get("source") or "meta-agent", lang=lang,
                origin=f"{where}: row {i} (template {tid})")
        except TemplateError as exc:
            raise InputError(where, f"row {i} (template {tid})", "text", str(exc)) from None
    if not templates:
        raise InputError(where, None, "kept", "no kept planner template")
    return templates


# --------------------------------------------------------------------------- the plan


def eligible_types(query: QueryInput) -> tuple[str, ...]:
    needed = len(query.likely_tool_ids)
    if needed == 0:
        return ("timing_decision",)
    if needed == 1:
        return ("tool_selection", "tool_retrieval")
    return ("multi_step_planning", "tool_selection", "tool_retrieval")


def _rank(seed: int, *parts: str) -> str:
    """A stable pseudo-random sort key."""
    return hashlib.sha256("|".join([str(seed), *parts]).encode()).hexdigest()


def assign_task_types(queries: Sequence[QueryInput], n_queries: int, weights: Mapping[str, float],
                      seed: int) -> list[tuple[QueryInput, str]]:
    """``n_queries`` (query, task type) pairs, each type as close to its share as its pool
    allows."""
    pools: dict[str, list[QueryInput]] = {t: [] for t in TASK_TYPES}
    for query in queries:
        for task_type in eligible_types(query):
            pools[task_type].append(query)
    for task_type, pool in pools.items():
        pool.sort(key=lambda q: (len(eligible_types(q)), _rank(seed, "pool", task_type, q.id)))
    active = [t for t in TASK_TYPES if pools[t] and weights.get(t, 0) > 0]
    total = sum(weights[t] for t in active)
    taken: set[str] = set()
    counts: Counter[str] = Counter()
    cursor = dict.fromkeys(active, 0)  # next untried position in each pool
    picked: list[tuple[QueryInput, str]] = []

    def has_free(task_type: str) -> bool:
        pool = pools[task_type]
        while cursor[task_type] < len(pool) and pool[cursor[task_type]].id in taken:
            cursor[task_type] += 1
        return cursor[task_type] < len(pool)

    while len(picked) < n_queries:
        open_types = [t for t in active if has_free(t)]
        if not open_types:
            break
        done = len(picked) + 1
        task_type = max(open_types, key=lambda t: (weights[t] / total * done - counts[t],
                                                   -TASK_TYPES.index(t)))
        query = pools[task_type][cursor[task_type]]
        taken.add(query.id)
        counts[task_type] += 1
        picked.append((query, task_type))
    return picked


def retrieval_subset(query: QueryInput, catalog: Sequence[str], retriever: Retriever,
                     size: int, seed: int) -> tuple[str, ...]:
    """The needed tools plus distractors up to ``size``: half the query's best retrieval
    matches, half random, shuffled."""
    rng = random.Random(_rank(seed, "retrieval", query.id))
    size = min(size, len(catalog))
    chosen = list(dict.fromkeys(query.likely_tool_ids))
    n_hard = (size - len(chosen)) // 2
    for name, _ in retriever.search(query.text, size + len(chosen)):
        if n_hard <= 0:
            break
        if name not in chosen:
            chosen.append(name)
            n_hard -= 1
    rest = [name for name in catalog if name not in chosen]
    chosen += rng.sample(rest, max(0, min(size - len(chosen), len(rest))))
    rng.shuffle(chosen)
    return tuple(chosen)


def combination_id(seed: int, query_id: str, template_id: str, task_type: str,
                   tools: Sequence[str]) -> str:
    digest = _rank(seed, query_id, template_id, task_type, ",".join(tools))
    return f"traj-{digest[:16]}"


def sample_combinations(inputs: SynthesisInputs, cfg: SynthesisConfig,
                        seed: int = 0) -> list[Combination]:
    """The plan: every sampled query under ``templates_per_query`` templates."""
    per_query = min(cfg.templates_per_query, len(inputs.templates))
    target = len(inputs.queries) * per_query
    if cfg.max_combinations is not None:
        target = min(target, cfg.max_combinations)
    if cfg.max_uses_per_template is not None:
        target = min(target, len(inputs.templates) * cfg.max_uses_per_template)
    assigned = assign_task_types(inputs.queries, math.ceil(target / per_query), cfg.task_weights,
                                 seed)
    catalog = sorted(inputs.tools)
    retriever = inputs.retrieval.index(list(inputs.tools.values()))
    uses: Counter[str] = Counter()
    plan: list[Combination] = []
    for query, task_type in assigned:
        if task_type == "tool_retrieval":
            tools = retrieval_subset(query, catalog, retriever, cfg.retrieval_tools, seed)
        else:
            tools = query.tool_ids
        room = [t for t in inputs.templates
                if cfg.max_uses_per_template is None or uses[t] < cfg.max_uses_per_template]
        room.sort(key=lambda t: (uses[t], _rank(seed, "template", query.id, t)))
        for template_id in room[: min(per_query, target - len(plan))]:
            uses[template_id] += 1
            plan.append(Combination(
                id=combination_id(seed, query.id, template_id, task_type, tools),
                query_id=query.id, set_id=query.set_id, query=query.text, lang=query.lang,
                task_type=task_type, template_id=template_id, tool_names=tuple(tools),
                expected_tools=query.likely_tool_ids))
    return plan


KIND_TASK_TYPES = {"single_call": "tool_selection", "parallel_calls": "tool_selection",
                   "multi_step": "multi_step_planning", "missing_info": "multi_step_planning",
                   "no_tool": "timing_decision", "irrelevant": "timing_decision"}
"""The task type (of the plain-query plan, the dataset's strata) each scenario kind counts as."""


def choose_scenarios(records: Sequence[ScenarioRecord], cfg: SynthesisConfig,
                     seed: int) -> list[ScenarioRecord]:
    """The train scenarios to synthesize: all, or ``max_scenarios`` drawn per kind by
    ``kind_shares`` (a kind short of scenarios gives its share to the others)."""
    train = [r for r in records if r.split == "train"]
    if cfg.max_scenarios is None or cfg.max_scenarios >= len(train):
        return train
    pools: dict[str, list[ScenarioRecord]] = {}
    for record in sorted(train, key=lambda r: _rank(seed, "scenario", r.scenario.id)):
        pools.setdefault(record.scenario.kind, []).append(record)
    chosen: list[ScenarioRecord] = []
    counts: Counter[str] = Counter()
    while len(chosen) < cfg.max_scenarios:
        open_kinds = [k for k, pool in pools.items()
                      if counts[k] < len(pool) and cfg.kind_shares.get(k, 0) > 0]
        if not open_kinds:
            break
        total = sum(cfg.kind_shares[k] for k in open_kinds)
        done = len(chosen) + 1
        kind = max(open_kinds, key=lambda k: (cfg.kind_shares[k] / total * done - counts[k], k))
        chosen.append(pools[kind][counts[kind]])
        counts[kind] += 1
    return chosen


@dataclass
class ScenarioOffer:
    """The tools a scenario is offered: of ``offered[environment]`` (its session's tools and
    ``ask_user``, in catalog order) all but the ``shared`` ones, which are offered when its
    ground truth calls them and otherwise as distractors: the ``distractors`` the retriever
    ranks highest for its request, then (a request that matches fewer) the next in catalog
    order; all of them when ``distractors`` is None. A prompt that lists what the task may
    need and a few decoys, not every shared utility. ``ask_user`` is always offered."""

    offered: Mapping[str, Sequence[str]]
    shared: frozenset[str] = frozenset()
    distractors: int | None = None
    tools: Mapping[str, ToolSpec] = field(default_factory=dict)
    """Every tool by name: what the retriever indexes."""
    retrieval: CandidateRetrieval = field(default_factory=CandidateRetrieval)
    from_session: bool = False
    """Draw the distractors from every tool of the session the ground truth does not call,
    the environment's own too (``distractors_from: session``), not only the shared ones."""
    _indexes: dict[tuple[str, ...], Retriever] = field(default_factory=dict, repr=False)

    def __call__(self, scenario: Scenario) -> tuple[str, ...]:
        candidates = tuple(self.offered[scenario.environment])
        if self.distractors is None or not (self.shared or self.from_session):
            return candidates
        needed = {call.name for call in scenario.calls()} | {ASK_USER}
        eligible = tuple(t for t in candidates
                         if t != ASK_USER and (self.from_session or t in self.shared))
        pool = [t for t in eligible if t not in needed]
        chosen: set[str] = set()
        if pool and self.distractors:
            if eligible not in self._indexes:  # once per environment: a hybrid index embeds
                self._indexes[eligible] = self.retrieval.index([self.tools[t] for t in eligible])
            ranked = [name for name, _ in self._indexes[eligible].search(scenario.request,
                                                                          len(eligible))]
            chosen = set([t for t in dict.fromkeys([*ranked, *pool]) if t in pool]
                         [: self.distractors])
        return tuple(t for t in candidates if t not in pool or t in chosen)


def scenario_combinations(records: Sequence[ScenarioRecord], templates: Mapping[str, AgentTemplate],
                          offered: Mapping[str, Sequence[str]] | ScenarioOffer,
                          cfg: SynthesisConfig, seed: int = 0) -> list[Combination]:
    """Every chosen train scenario under ``templates_per_scenario`` templates of its language
    (bilingual ones fit both), use balanced across templates. ``offered`` maps an environment
    to the tools a scenario there sees (``ask_user`` included), or is a :class:`ScenarioOffer`
    that chooses them per scenario."""
    offer = offered if isinstance(offered, ScenarioOffer) else ScenarioOffer(offered)
    uses: Counter[str] = Counter()
    plan: list[Combination] = []
    for record in choose_scenarios(records, cfg, seed):
        scenario = record.scenario
        fitting = [t for t in templates if templates[t].lang in (None, scenario.lang)]
        fitting.sort(key=lambda t: (uses[t], _rank(seed, "template", scenario.id, t)))
        tools = offer(scenario)
        for template_id in fitting[: cfg.templates_per_scenario]:
            uses[template_id] += 1
            plan.append(Combination(
                id=combination_id(seed, f"scenario:{scenario.id}", template_id, scenario.kind,
                                  tools),
                query_id=scenario.id, set_id=scenario.group(), query=scenario.request,
                lang=scenario.lang, task_type=KIND_TASK_TYPES[scenario.kind],
                template_id=template_id, tool_names=tools,
                expected_tools=tuple(dict.fromkeys(c.name for c in scenario.calls())),
                scenario_id=scenario.id, kind=scenario.kind))
    return plan


def plan_synthesis(inputs: SynthesisInputs, cfg: SynthesisConfig,
                   seed: int = 0) -> list[Combination]:
    """The whole plan: the scenario combinations, then the plain-query ones when asked for."""
    offer = ScenarioOffer(inputs.offered, inputs.shared, cfg.distractor_tools,
                          inputs.all_tools(), inputs.retrieval,
                          from_session=cfg.distractors_from == "session")
    plan = scenario_combinations(inputs.scenarios, inputs.templates, offer, cfg, seed) \
        if inputs.scenarios else []
    if cfg.use_queries:
        plan += sample_combinations(inputs, cfg, seed)
    return plan


def plan_summary(plan: Sequence[Combination]) -> dict[str, Any]:
    """Counts of the plan by task type and template (for the run summary)."""
    return {
        "combinations": len(plan),
        "queries": len({c.query_id for c in plan}),
        "by_task_type": dict(Counter(c.task_type for c in plan)),
        "by_kind": dict(Counter(c.kind or "query" for c in plan)),
        "by_template": dict(Counter(c.template_id for c in plan)),
    }
