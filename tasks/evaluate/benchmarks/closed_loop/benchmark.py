"""The closed-loop benchmark of the evaluate stage: which scenarios, under which templates and in
which form each model is run, the trials themselves (published as ``eval_rollouts``, reused when
the same model, scenarios and settings were run), and the report's part (``closed_loop_report``).

Cases are (scenario, template group) pairs. The scenarios are those of the configured splits
(held-out ones of the training environments, the reserved environment's), at most
``max_scenarios`` each, spread over the kinds. The groups are the configured benchmark templates
and the templates build_templates reserved for evaluation (never trained on): in the ``steps``
form a group's template is the prompt, in the ``messages`` form its Profile is the system
message. Every model runs the same cases, so pass@1 per group gives the format-sensitivity table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset, Features, Json, List, Value

from agentune.config import RunConfig
from agentune.config.evaluate import CLOSED_LOOP_READS, ClosedLoopConfig
from agentune.config.llm import RoleConfig
from agentune.tasks.agent.system_prompt import system_message
from agentune.tasks.environments.catalog import (
    EnvironmentCatalog,
    configured_environments,
    fingerprint,
)
from agentune.tasks.environments.scenarios import Scenario, ScenarioRecord, read_scenario_rows
from agentune.tasks.evaluate import STAGE
from agentune.tasks.evaluate.benchmark import (
    Benchmark,
    BenchmarkRun,
    Log,
    Section,
    progress_log,
)
from agentune.tasks.evaluate.benchmarks.closed_loop.report import (
    closed_loop_markdown,
    closed_loop_rows,
    closed_loop_summary,
    plot_closed_loop,
)
from agentune.tasks.evaluate.models import ResolvedModel, asked_natively
from agentune.tasks.evaluate.prompt_templates import PromptTemplate, choose_templates
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.rollouts.closed_loop import (
    ClosedLoopScores,
    NativePolicy,
    Policy,
    TemplatePolicy,
    TrialSettings,
    scenario_tools,
    spread,
)
from agentune.tasks.rollouts.driver import Framing, Progress, run_closed_loop
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest, StoreError, VersionRef
from agentune.tasks.store.inputs import version_params
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval, candidate_retrieval
from agentune.tasks.tool_retrieval.index import Retriever

ROLLOUTS_ARTIFACT = "eval_rollouts"
ROLLOUT_FEATURES = Features({
    "model": Value("string"), "scenario_id": Value("string"), "kind": Value("string"),
    "lang": Value("string"), "environment": Value("string"), "split": Value("string"),
    "group": Value("string"), "form": Value("string"), "trial": Value("int32"),
    "passed": Value("bool"), "reward": Value("float64"), "components": Json(),
    "reasons": List(Value("string")), "messages": List(Json()), "error": Value("string"),
})


@dataclass(frozen=True)
class ClosedLoopInputs:
    """What every model is run on: the scenarios version, the cases' scenarios and groups."""

    scenarios_ref: VersionRef
    records: list[ScenarioRecord]
    groups: list[PromptTemplate]
    templates_ref: VersionRef | None
    skipped: list[dict[str, str]]
    retrieval: CandidateRetrieval = field(default_factory=CandidateRetrieval)
    """How the offered tools are ranked when ``max_tools`` caps them."""
    retriever_ref: VersionRef | None = None


def closed_loop_inputs(config: RunConfig, store: ArtifactStore) -> ClosedLoopInputs | None:
    """The cases, or None when no scenarios version exists (the report says so)."""
    cfg, loop = config.evaluate, config.evaluate.closed_loop
    try:
        ref = store.resolve(loop.scenarios or "scenarios")
    except StoreError:
        return None
    rows = list(store.read(ref).to_dict("records"))
    records = read_scenario_rows(rows, str(ref))
    chosen = [r for split in loop.splits
              for r in spread([r for r in records if r.split == split], loop.max_scenarios,
                              config.seed)]
    templates_ref = None
    template_rows: list[dict[str, Any]] = []
    try:
        templates_ref = store.resolve(cfg.templates or "templates")
        template_rows = list(store.read(templates_ref).to_dict("records"))
    except StoreError:
        pass
    groups, skipped = choose_templates(benchmark=loop.templates, template_rows=template_rows,
                                       seen_ids=set(), unseen=config.templates.unseen_templates,
                                       seed=config.seed, origin=str(templates_ref))
    retrieval, retriever_ref = candidate_retrieval(store, loop.retriever)  # only with max_tools
    return ClosedLoopInputs(ref, chosen, groups, templates_ref, skipped, retrieval, retriever_ref)


class OfferedTools:
    """The tools each case is offered: its environment's, or with ``max_tools`` the best that
    many for its request, each environment's tools indexed once."""

    def __init__(self, catalog: EnvironmentCatalog, max_tools: int | None,
                 retrieval: CandidateRetrieval, *, in_request_language: bool = False,
                 needed: Literal["catalog", "first", "last"] = "catalog") -> None:
        self.catalog, self.max_tools, self.retrieval = catalog, max_tools, retrieval
        self.in_request_language = in_request_language
        """Descriptions in the request's language only, as the training rows have them."""
        self.needed = needed
        """Where the ground truth's tools stand in the offer (ClosedLoopConfig.needed_tools)."""
        self._indexes: dict[str, Retriever] = {}

    def __call__(self, scenario: Scenario) -> list[dict[str, Any]]:
        env = scenario.environment
        lang = scenario.lang if self.in_request_language else None
        tools = self.catalog.offered_tools(env)
        if self.max_tools is None or len(tools) <= self.max_tools:
            offer = scenario_tools(self.catalog, env, lang=lang)
        else:
            if env not in self._indexes:
                self._indexes[env] = self.retrieval.index(tools)
            best = self._indexes[env].search(scenario.request, self.max_tools)
            offer = scenario_tools(self.catalog, env, only={name for name, _ in best}, lang=lang)
        return offer if self.needed == "catalog" else self._placed(offer, scenario)

    def _placed(self, offer: list[dict[str, Any]], scenario: Scenario) -> list[dict[str, Any]]:
        """The offer with the needed tools moved first or last among the environment's tools,
        each group in its catalog order, ``ask_user`` (the offer's last entry) kept last."""
        needed = {call.name for call in scenario.calls()}
        *tools, ask = offer
        moved = [t for t in tools if t["function"]["name"] in needed]
        others = [t for t in tools if t["function"]["name"] not in needed]
        return [*(moved + others if self.needed == "first" else others + moved), ask]


def forms(loop: ClosedLoopConfig, trained_forms: Sequence[str]) -> list[str]:
    """The forms to run: as configured, or (auto) the one the trained model was trained in."""
    if loop.form == "both":
        return ["messages", "steps"]
    if loop.form == "auto":
        return [trained_forms[0] if trained_forms else "messages"]
    return [loop.form]


def trained_form(store: ArtifactStore, ref: VersionRef | None) -> str | None:
    """The sample form a ``model`` version was trained in (None: not a trained version)."""
    if ref is None:
        return None
    params = store.manifest(ref).params
    # Under `train` since a model's params are what train reads; at the top in older stores.
    form = params.get("train", {}).get("sample_form", params.get("sample_form"))
    return str(form) if form else None


def trial_settings(loop: ClosedLoopConfig, config: RunConfig) -> TrialSettings:
    return TrialSettings(trials=loop.trials, temperature=loop.temperature, top_p=None,
                         max_tokens=loop.max_tokens, max_steps=loop.max_steps,
                         max_user_turns=loop.max_user_turns,
                         user_max_chars=config.synthesis.user_max_chars, seed=config.seed)


def rollout_params(config: RunConfig, identity: Mapping[str, Any], form: str,
                   inputs: ClosedLoopInputs, catalog: EnvironmentCatalog) -> dict[str, Any]:
    """What the closed loop reads (``CLOSED_LOOP_READS``), the form it runs, the model and the
    cases (scenarios and template groups)."""
    declared = version_params(config, CLOSED_LOOP_READS, {
        "environments.catalog": fingerprint(catalog), "evaluate.closed_loop.form": form})
    return {**declared, "model": dict(identity),
            "scenarios": sorted(r.scenario.id for r in inputs.records),
            "groups": {g.key: g.template.id for g in inputs.groups}}


@dataclass
class RolloutRun:
    model: str
    form: str
    rows: list[dict[str, Any]]
    manifest: Manifest
    reused: bool


def case_policy(form: str, gateway: ChatGateway, group: PromptTemplate,
                tools: list[dict[str, Any]], record: ScenarioRecord, settings: TrialSettings
                ) -> tuple[Policy, str | None]:
    """The policy for one case, and the system message (messages form: the group's Profile and
    the clock, as a training row of the scenario has it: :func:`system_message`)."""
    scenario = record.scenario
    if form == "steps":
        return TemplatePolicy(gateway, "student", group.template, tools, settings, STAGE,
                              record.now, scenario.lang), None
    system = system_message(group.template, scenario.request, tools, lang=scenario.lang,
                            now=record.now)
    return NativePolicy(gateway, "student", tools, settings, STAGE), system


async def run_model(config: RunConfig, store: ArtifactStore, *, label: str, role: RoleConfig,
                    identity: Mapping[str, Any], parent: VersionRef | None, form: str,
                    inputs: ClosedLoopInputs, catalog: EnvironmentCatalog,
                    on_progress: Progress | None = None) -> RolloutRun:
    """Every case x trial of one model in one form, verified and published (or reused)."""
    params = rollout_params(config, identity, form, inputs, catalog)
    parents = [inputs.scenarios_ref, *([inputs.templates_ref] if inputs.templates_ref else []),
               *([inputs.retriever_ref] if inputs.retriever_ref else []),
               *([parent] if parent else [])]
    found = store.find(ROLLOUTS_ARTIFACT, parents=parents, params=params)
    if found is not None:
        rows = [{**r, "model": label} for r in Dataset(store.read_arrow(found.ref))]
        return RolloutRun(label, form, rows, found, True)
    loop = config.evaluate.closed_loop
    settings = trial_settings(loop, config)
    offered = OfferedTools(catalog, loop.max_tools, inputs.retrieval,
                           in_request_language=config.synthesis.tool_descriptions == "request",
                           needed=loop.needed_tools)

    def frame(gateway: ChatGateway, record: ScenarioRecord, group: PromptTemplate) -> Framing:
        tools = offered(record.scenario)
        policy, system = case_policy(form, gateway, group, tools, record, settings)
        return Framing(group.key, policy, system, tools)

    trials = await run_closed_loop(
        inputs.records, inputs.groups, frame, role=role, llm=config.llm, catalog=catalog,
        tools=config.environments.tools, verifier=config.verifier, settings=settings, stage=STAGE,
        now=config.evaluate.current_time, on_progress=on_progress)
    rows = [t.trial.row(t.record, label) for t in trials]
    rows.sort(key=lambda r: (r["split"], r["scenario_id"], r["group"], r["trial"]))
    manifest = store.publish(
        ROLLOUTS_ARTIFACT, rows, parents=parents, params=params, features=ROLLOUT_FEATURES,
        stats={"model": label, "form": form, "trials": len(rows),
               "passed": sum(bool(r["passed"]) for r in rows)},
        description=f"{label} ({role.model}) in closed loop on {inputs.scenarios_ref}, "
        f"{form} form: every trial's conversation and verdict")
    return RolloutRun(label, form, rows, manifest, False)


class ClosedLoop(Benchmark[ClosedLoopInputs | None, list[RolloutRun]]):
    """Every model acting in the scenarios' environments, in every form asked for, on the same
    cases; the report's closed-loop tables and ``closed_loop.png``."""

    name = "closed loop"

    def prepare(self, config: RunConfig, store: ArtifactStore) -> ClosedLoopInputs | None:
        """The cases (None: closed loop off, or no scenarios version)."""
        return closed_loop_inputs(config, store) if config.evaluate.closed_loop.enabled else None

    async def run(self, config: RunConfig, store: ArtifactStore, plan: ClosedLoopInputs | None,
                  models: Sequence[ResolvedModel], log: Log
                  ) -> BenchmarkRun[list[RolloutRun]]:
        loop = config.evaluate.closed_loop
        if not loop.enabled:
            return BenchmarkRun(self, [])
        if plan is None or not plan.records:
            return BenchmarkRun(self, [], notes=[
                f"closed loop: no scenarios of the splits {', '.join(loop.splits)} "
                "(run build_scenarios first)"])
        catalog = configured_environments(config.environments)
        trained = [f for f in (trained_form(store, m.parent) for m in models) if f]
        runs = []
        for form in forms(loop, trained):
            for model in models:
                role, identity = (asked_natively(config, model) if form == "messages"
                                  else (model.role, model.identity))
                progress = progress_log(
                    log, f"{model.label}, {form} form: ",
                    f"{{total}} trials ({len(plan.records)} scenarios x {len(plan.groups)} "
                    f"groups x {loop.trials})", "{done}/{total} trials done")
                runs.append(await run_model(
                    config, store, label=model.label, role=role, identity=identity,
                    parent=model.parent, form=form, inputs=plan, catalog=catalog,
                    on_progress=progress))
        return BenchmarkRun(self, runs, {f"eval_rollouts:{r.form}:{r.model}": r for r in runs})

    def section(self, config: RunConfig, result: list[RolloutRun],
                notes: Sequence[str]) -> Section:
        by_form = {form: ClosedLoopScores([row for r in result if r.form == form
                                           for row in r.rows])
                   for form in dict.fromkeys(r.form for r in result)}
        summary = closed_loop_summary([row for r in result for row in r.rows])
        return Section(
            [row for form, scores in by_form.items() for row in closed_loop_rows(scores, form)],
            "\n\n".join(closed_loop_markdown(scores, form) for form, scores in by_form.items()),
            summary, stats={"closed_loop": summary}, parents=[r.manifest.ref for r in result],
            table=("closed-loop", "closed loop: pass@1, pass^k and reward per model and split"))

    def figures(self, config: RunConfig, result: list[RolloutRun], section: Section,
                folder: Path) -> dict[str, Path]:
        rows = [row for r in result for row in r.rows]
        if not rows:
            return {}
        return {"closed_loop.png": plot_closed_loop(
            rows, folder / "closed_loop.png", f"{STAGE}: closed-loop pass@1 per scenario kind")}
