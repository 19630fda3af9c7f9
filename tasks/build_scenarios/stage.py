"""build_scenarios as plain functions: the seed file's scenarios and the teacher's, each ground
truth run in a fresh environment, the failures rejected, the rest split and published.

1. the seed file, checked as input (a bad row is an error naming file, row and field);
2. teacher-written scenarios for ``teacher_sets`` query sets (a bad answer is a reject);
3. every ground truth executed: a failing call, or no state change where a writing tool was
   called, rejects the scenario; a teacher scenario's facts must be found in what its calls
   returned (or its request), the others are dropped from it;
4. splits: ``reserved`` for a reserved environment's scenarios, else ``heldout`` or ``train`` by
   a seeded draw per family;
5. with ``generate.enabled``: scenarios generated from the environments' recipes in sampled
   worlds (:mod:`.generation`), split by construction (train / heldout / dev / reserved),
   optionally paraphrased by the teacher; the written scenarios of the training environments are
   then the ``natural`` split, evaluated and never trained on.

The flow looks the outputs up by the queries version and :func:`scenario_params`, reads the
queries (:func:`read_query_rows`) and runs :func:`build_scenario_set`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentune.config import RunConfig
from agentune.config.build_scenarios import (
    READS,
    BuildScenariosConfig,
    ScenarioGenerationConfig,
)
from agentune.tasks.agent.request_judge import read_request_score, request_judge_request
from agentune.tasks.build_scenarios import STAGE
from agentune.tasks.build_scenarios.generation import (
    Generated,
    GenerationPlan,
    generate_scenarios,
)
from agentune.tasks.build_scenarios.paraphrase import (
    lost_values,
    paraphrase_request,
    read_paraphrase,
)
from agentune.tasks.build_scenarios.writer import (
    QuerySetSummary,
    ScenarioBrief,
    ScenarioWriterError,
    plan_briefs,
    read_scenario,
    writer_request,
)
from agentune.tasks.common.input_files import InputError
from agentune.tasks.common.rejects import Reject, reason_counts
from agentune.tasks.common.text_cleaning import detect_language
from agentune.tasks.common.text_quality import written_text_problem
from agentune.tasks.environments.catalog import (
    EnvironmentCatalog,
    fingerprint,
)
from agentune.tasks.environments.replay import Episode, execute_ground_truth
from agentune.tasks.environments.scenarios import (
    Scenario,
    assign_split,
    check_scenario,
    load_scenarios,
    scenario_row,
)
from agentune.tasks.environments.session import EnvironmentSession
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef
from agentune.tasks.store.inputs import version_params
from agentune.tasks.verifier import VERSION as VERIFIER_VERSION
from agentune.tasks.verifier.answers import fact_found, normalise

log = logging.getLogger("agentune.build_scenarios")


@dataclass
class ScenarioSet:
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)

    def reject_rows(self) -> list[dict[str, str]]:
        return [r.to_row() for r in self.rejects]


def scenario_params(config: RunConfig, catalog: EnvironmentCatalog) -> dict[str, Any]:
    """What decides the outputs besides the queries: what the stage reads (``READS``), the
    catalog as the environments' code, data and recipes."""
    return version_params(config, READS, {"environments.catalog": fingerprint(catalog)})


def read_query_rows(store: ArtifactStore, ref: VersionRef) -> list[dict[str, Any]]:
    """The query sets' rows of a ``queries`` version."""
    return store.read(ref).to_dict("records")


def _as_list(value: Any) -> list[Any]:
    """A list cell as read by pandas (a numpy array) or by datasets (a list), None as empty."""
    return [] if value is None else list(value)


def query_set_summaries(query_rows: Sequence[Mapping[str, Any]]) -> list[QuerySetSummary]:
    """The query sets of a ``queries`` table, in set order: language, texts, needed tools."""
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for row in query_rows:
        by_set.setdefault(str(row["set_id"]), []).append(row)
    out = []
    for set_id, rows in sorted(by_set.items()):
        langs = Counter(str(r["lang"]) for r in rows)
        needed = Counter(t for r in rows for t in _as_list(r.get("likely_tool_ids")))
        out.append(QuerySetSummary(set_id, langs.most_common(1)[0][0],
                                   tuple(str(r["text"]) for r in rows[:5]),
                                   tuple(t for t, _ in needed.most_common())))
    return out


async def write_teacher_scenarios(
    briefs: Sequence[ScenarioBrief], catalog: EnvironmentCatalog, cfg: BuildScenariosConfig, *,
    gateway: ChatGateway, seed: int, today: str,
) -> tuple[list[Scenario], list[Reject]]:
    """One teacher answer per brief, read and checked against the environments."""

    async def one(brief: ScenarioBrief) -> Scenario | Reject:
        spec = catalog.environments[brief.environment]
        world = EnvironmentSession(catalog, brief.environment, gateway=gateway).state() \
            if spec.kind == "python" else {}
        request = writer_request(brief, spec, world.get(spec.name, {}), cfg, today=today,
                                 seed=seed)
        try:
            scenario = read_scenario(brief, await gateway.chat("teacher", request, stage=STAGE))
            check_scenario(scenario, catalog, file="teacher", where=brief.scenario_id)
        except GatewayError as exc:
            return Reject(STAGE, "teacher_failed", brief.scenario_id, str(exc))
        except ScenarioWriterError as exc:
            return Reject(STAGE, "unreadable_scenario", brief.scenario_id, str(exc))
        except InputError as exc:
            return Reject(STAGE, "invalid_scenario", brief.scenario_id, str(exc))
        problem = written_text_problem(scenario.request, scenario.lang)
        if problem is None and detect_language(scenario.request) != scenario.lang:
            problem = "wrong_language"
        if problem is not None:
            return Reject(STAGE, problem, brief.scenario_id,
                          f"asked for {scenario.lang}: {scenario.request[:80]!r}")
        if cfg.min_judge_score is not None:
            calls = json.dumps([c.model_dump() for c in scenario.calls()], ensure_ascii=False)
            context = f"environment {scenario.environment}; the calls that solve it: {calls}"
            try:
                score = read_request_score(await gateway.chat("judge", request_judge_request(
                    scenario.request, context, seed=seed), stage=STAGE))
            except GatewayError as exc:
                return Reject(STAGE, "judge_failed", brief.scenario_id, str(exc))
            if score is None or score < cfg.min_judge_score:
                return Reject(STAGE, "judged_low", brief.scenario_id,
                              f"judge score {score}: {scenario.request[:80]!r}")
        return scenario

    done = await asyncio.gather(*(one(b) for b in briefs))
    return ([d for d in done if isinstance(d, Scenario)],
            [d for d in done if isinstance(d, Reject)])


def _grounded(scenario: Scenario, results: Sequence[Any]) -> Scenario:
    """A teacher scenario keeps only the facts its calls returned (or its request says)."""
    known = json.dumps(results, ensure_ascii=False) + scenario.request
    return scenario.model_copy(update={"facts": [f for f in scenario.facts
                                                 if fact_found(f, known)]})


async def execute_all(scenarios: Sequence[Scenario], episode: Episode, cfg: BuildScenariosConfig,
                      *, seed: int, natural: bool = False) -> ScenarioSet:
    """Every ground truth run; rows for those that stand, rejects for the rest (``natural``:
    written scenarios of the training environments go to the ``natural`` split)."""
    out = ScenarioSet()
    for scenario in scenarios:
        run = await execute_ground_truth(scenario, episode)
        if run.problem is not None:
            out.rejects.append(Reject(STAGE, run.problem[0], scenario.id, run.problem[1]))
            continue
        if scenario.source == "teacher":
            scenario = _grounded(scenario, run.results)
        split = assign_split(scenario, episode.catalog, heldout_fraction=cfg.heldout_fraction,
                             seed=seed, natural=natural and scenario.source == "seed")
        out.rows.append(scenario_row(scenario, split, episode.now, run, VERIFIER_VERSION))
    return out


async def paraphrase_all(made: Sequence[Generated], gateway: ChatGateway,
                         cfg: ScenarioGenerationConfig, *, seed: int
                         ) -> tuple[list[Generated], list[Reject]]:
    """The teacher's wording of each generated request where it keeps every value the request
    states; the rendered request (and a reject saying why) elsewhere."""

    async def one(i: int, g: Generated) -> Generated | Reject:
        try:
            result = await gateway.chat("teacher", paraphrase_request(
                g.draft, seed=seed + i, max_tokens=cfg.paraphrase_max_tokens), stage=STAGE)
        except GatewayError as exc:
            return Reject(STAGE, "paraphrase_failed", g.scenario.id, str(exc)[:300])
        text = read_paraphrase(result)
        lost = lost_values(g.draft, text) if text else ["(empty answer)"]
        if lost or detect_language(text) != g.scenario.lang:
            why = f"lost {lost}" if lost else "another language"
            return Reject(STAGE, "paraphrase_lost_value", g.scenario.id,
                          f"recipe {g.draft.recipe.id}: {why}: {text[:120]!r}")
        return replace(g, scenario=g.scenario.model_copy(update={"request": text}))

    done = await asyncio.gather(*(one(i, g) for i, g in enumerate(made)))
    kept = [d if isinstance(d, Generated) else g for d, g in zip(done, made, strict=True)]
    return kept, [d for d in done if isinstance(d, Reject)]


async def generate(cfg: BuildScenariosConfig, catalog: EnvironmentCatalog, episode: Episode, *,
                   gateway: ChatGateway, seed: int, written: Sequence[Scenario]
                   ) -> tuple[list[dict[str, Any]], list[Reject], list[str]]:
    """Generated scenarios as rows, their rejects, and a line per split made short."""
    g = cfg.generate
    result = await generate_scenarios(catalog, episode, GenerationPlan(
        g.train, g.heldout, g.reserved, heldout_families=g.heldout_families, dev=g.dev,
        dev_families=g.dev_families, max_worlds=g.max_worlds, seed=seed,
        written=frozenset(normalise(s.request) for s in written)))
    rejects = [Reject(STAGE, r.reason, r.item_id, r.detail) for r in result.rejects]
    taken = {s.id for s in written}
    made = [m for m in result.made if m.scenario.id not in taken]
    rejects += [Reject(STAGE, "duplicate_id", m.scenario.id, "a seed scenario has it")
                for m in result.made if m.scenario.id in taken]
    if g.paraphrase:
        made, failed = await paraphrase_all(made, gateway, g, seed=seed)
        rejects += failed
    rows = [scenario_row(m.scenario, m.split, episode.now, m.run, VERIFIER_VERSION) for m in made]
    return rows, rejects, result.shortfalls()


def summary_rows(rows: Sequence[Mapping[str, Any]], rejects: Sequence[Reject],
                 written: int, seeded: int, short: Sequence[str] = ()) -> list[dict[str, Any]]:
    table = [{"metric": "seed scenarios", "value": seeded},
             {"metric": "teacher scenarios asked", "value": written},
             {"metric": "scenarios kept", "value": len(rows)}]
    table += [{"metric": f"generated short: {line}", "value": 1} for line in short]
    for key in ("split", "kind", "environment", "lang", "source"):
        for value, n in sorted(Counter(str(r[key]) for r in rows).items()):
            table.append({"metric": f"{key}: {value}", "value": n})
    table += [{"metric": f"dropped: {reason}", "value": n}
              for reason, n in reason_counts(rejects).items()]
    return table


async def build_scenario_set(cfg: BuildScenariosConfig, catalog: EnvironmentCatalog,
                             query_rows: Sequence[Mapping[str, Any]], *, episode: Episode,
                             gateway: ChatGateway, seed: int) -> ScenarioSet:
    """The whole stage short of publishing."""
    seeded = load_scenarios(cfg.seed_file, catalog) if cfg.seed_file else []
    rejects: list[Reject] = []
    written: list[Scenario] = []
    sets = query_set_summaries(query_rows)
    if cfg.teacher_sets:
        chosen = random.Random(seed).sample(sets, min(cfg.teacher_sets, len(sets)))
        specs = [catalog.environments[name] for name in catalog.training()]
        briefs, unserved = plan_briefs(chosen, specs, per_set=cfg.scenarios_per_set)
        rejects += [Reject(STAGE, "no_environment", set_id, "no training environment has the "
                           "tools this query set needs") for set_id in unserved]
        written, failed = await write_teacher_scenarios(
            briefs, catalog, cfg, gateway=gateway, seed=seed, today=episode.now.date().isoformat())
        rejects += failed
    seen = {s.id for s in seeded}
    for scenario in list(written):
        if scenario.id in seen:
            rejects.append(Reject(STAGE, "duplicate_id", scenario.id, "a seed scenario has it"))
            written.remove(scenario)
    generating = cfg.generate.enabled
    result = await execute_all([*seeded, *written], episode, cfg, seed=seed, natural=generating)
    result.rejects = rejects + result.rejects
    short: list[str] = []
    if generating:
        rows, failed, short = await generate(cfg, catalog, episode, gateway=gateway, seed=seed,
                                             written=[*seeded, *written])
        result.rows += rows
        result.rejects += failed
        for line in short:
            log.warning("build_scenarios: generated %s (dropped: %s)", line,
                        reason_counts(failed))
    if not result.rows:
        raise InputError(cfg.seed_file or "build_scenarios", None, None,
                         f"no scenario is left (dropped: {reason_counts(result.rejects)})")
    result.summary = summary_rows(result.rows, result.rejects, written=len(written) + len(
        [r for r in rejects if r.reason != "no_environment"]), seeded=len(seeded), short=short)
    return result
