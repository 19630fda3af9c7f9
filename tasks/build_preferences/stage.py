"""The build_preferences stage's work as plain functions, in the order the flow runs them.

:func:`resolve_inputs` finds the ``attempts`` version (synthesis: every attempt of a scenario with
its verdict), the ``scenarios`` version, the ``sft_dataset`` version (its train rows give the
pairs for the decision to call a tool or not, ``decisions.py``) and the student model when its
rollouts are on;
:func:`preference_params` says what else decides the pairs; :func:`read_records` reads the
scenarios. :func:`stored_attempt_candidates` reads the attempts and :func:`attempt_candidates`
scores every one with the configured reward (from the verdict the synthesis stored, re-verifying
nothing); :func:`student_candidates` rolls the student out k times on each training scenario
(sampled, each rollout verified in a fresh session) and scores those.
:func:`~agentune.tasks.build_preferences.pairs.build_pairs` pairs them; the flow publishes
``preferences`` with the counts by source and kind and the margin histogram.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

from agentune.config import RunConfig
from agentune.config.build_preferences import READS
from agentune.config.llm import RoleConfig
from agentune.tasks.agent.prompt_templates import benchmark_template
from agentune.tasks.agent.system_prompt import system_message
from agentune.tasks.build_preferences import STAGE
from agentune.tasks.build_preferences.decisions import decision_pairs
from agentune.tasks.build_preferences.pairs import Candidate, PairBuild, build_pairs, pair_key
from agentune.tasks.common.figures import png_figure
from agentune.tasks.environments.catalog import EnvironmentCatalog, fingerprint
from agentune.tasks.environments.scenarios import ScenarioRecord, read_scenario_rows
from agentune.tasks.llm.model_folders import ModelFolder, resolve_model
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.rollouts.closed_loop import (
    NativePolicy,
    TrialSettings,
    native_role,
    scenario_tools,
    spread,
)
from agentune.tasks.rollouts.driver import Framing, Progress, run_closed_loop
from agentune.tasks.store.artifact_store import ArtifactStore, StoreError, VersionRef
from agentune.tasks.store.inputs import version_params
from agentune.tasks.verifier.rewards import RewardModel, needs_rollout, verdict_of_row
from agentune.tasks.verifier.rollout import from_messages
from agentune.tasks.verifier.verify import Verdict

ARTIFACT = "preferences"
ATTEMPTS = "attempts"
SCENARIOS = "scenarios"
DATASET = "sft_dataset"


class PreferenceInputError(ValueError):
    """Inputs that cannot give pairs; the message says which and what to run."""


@dataclass(frozen=True)
class PreferenceInputs:
    attempts: VersionRef | None
    scenarios: VersionRef | None
    student: ModelFolder | None
    notes: list[str] = field(default_factory=list)
    dataset: VersionRef | None = None

    @property
    def parents(self) -> list[VersionRef]:
        found = [self.attempts, self.scenarios, self.dataset,
                 self.student.version if self.student is not None else None]
        return [ref for ref in found if ref is not None]


def _optional_input(store: ArtifactStore, named: str | None, default: str, missing: str,
                    notes: list[str]) -> VersionRef | None:
    """The version ``named`` (an error when it is not there), else the latest ``default``, else
    None with the note ``missing``."""
    try:
        return store.resolve(named or default)
    except StoreError:
        if named:
            raise
        notes.append(missing)
        return None


def resolve_inputs(config: RunConfig, store: ArtifactStore) -> PreferenceInputs:
    cfg = config.preferences
    notes: list[str] = []
    attempts = _optional_input(
        store, cfg.attempts, ATTEMPTS, "no attempts version: no pairs from synthesis (run "
        "synthesize first)", notes) if cfg.from_attempts else None
    dataset = _optional_input(
        store, cfg.dataset, DATASET, "no sft_dataset version: no decision pairs (run "
        "build_dataset first)", notes) if cfg.from_dataset else None
    scenarios = None
    if cfg.scenarios:
        scenarios = store.resolve(cfg.scenarios)
    elif attempts is not None:
        scenarios = next((p for p in store.manifest(attempts).parent_refs
                          if p.name == SCENARIOS), None)
    if scenarios is None:
        try:
            scenarios = store.resolve(SCENARIOS)
        except StoreError:
            scenarios = None
    student = None
    if cfg.student.enabled:
        if scenarios is None:
            raise PreferenceInputError("preferences.student: rolling the student out needs a "
                                       "scenarios version (run build_scenarios first)")
        if cfg.student.provider == "openai":
            if not cfg.student.base_url:
                raise PreferenceInputError("preferences.student.base_url: an openai student "
                                           "needs its endpoint")
            student = ModelFolder(cfg.student.model, Path("."), {
                "provider": "openai", "base_url": cfg.student.base_url,
                "model": cfg.student.model}, None)
        else:
            student = resolve_model(cfg.student.model, store)
    if attempts is None and student is None and dataset is None:
        raise PreferenceInputError(
            "build_preferences has nothing to pair: no attempts version (run synthesize), no "
            "sft_dataset version (run build_dataset) and preferences.student.enabled is off")
    return PreferenceInputs(attempts, scenarios, student, notes, dataset)


def preference_params(config: RunConfig, inputs: PreferenceInputs, reward: RewardModel,
                      catalog: EnvironmentCatalog | None) -> dict[str, Any]:
    """What decides the pairs besides the parent versions."""
    return version_params(config, READS, {
        "preferences.student.model": inputs.student.identity if inputs.student else None,
        # The environments run only the student's rollouts.
        "environments.catalog": fingerprint(catalog) if catalog is not None else None,
        "reward": reward.lineage()})


def read_records(store: ArtifactStore, ref: VersionRef | None) -> dict[str, ScenarioRecord]:
    if ref is None:
        return {}
    rows = list(Dataset(store.read_arrow(ref)))
    return {r.scenario.id: r for r in read_scenario_rows(rows, str(ref))}


def _components(verdict: Verdict, terms: Mapping[str, float]) -> dict[str, float]:
    return {**{k: float(v) for k, v in verdict.components.items()},
            **{f"reward:{k}": v for k, v in terms.items()}}


def attempt_candidates(rows: Sequence[Mapping[str, Any]], reward: RewardModel,
                       records: Mapping[str, ScenarioRecord]) -> list[Candidate]:
    """Every verified attempt that acted out a scenario in the messages form, scored."""
    with_rollout = needs_rollout(reward)
    out = []
    for row in rows:
        if not row.get("scenario_id") or not row.get("messages") or row.get("reward") is None:
            continue
        verdict = verdict_of_row(row)
        record = records.get(str(row["scenario_id"]))
        rollout = from_messages(list(row["messages"])) if with_rollout else None
        score = reward.score(verdict, scenario=record.scenario if record else None,
                             rollout=rollout)
        out.append(Candidate(
            id=str(row["id"]), source="attempts", scenario_id=str(row["scenario_id"]),
            kind=str(row.get("kind") or ""), lang=str(row.get("lang") or ""),
            messages=[dict(m) for m in row["messages"]],
            tools=[dict(t) for t in row.get("tools") or []],
            reward=score.total, components=_components(verdict, score.terms)))
    return out


def stored_attempt_candidates(store: ArtifactStore, inputs: PreferenceInputs, reward: RewardModel,
                              records: Mapping[str, ScenarioRecord]) -> list[Candidate]:
    """:func:`attempt_candidates` of the attempts version (none when none is read)."""
    if inputs.attempts is None:
        return []
    return attempt_candidates(list(Dataset(store.read_arrow(inputs.attempts))), reward, records)


def student_settings(config: RunConfig) -> TrialSettings:
    s = config.preferences.student
    return TrialSettings(trials=s.samples, temperature=s.temperature, top_p=s.top_p,
                         max_tokens=s.max_tokens, max_steps=s.max_steps,
                         max_user_turns=s.max_user_turns,
                         user_max_chars=config.synthesis.user_max_chars, seed=config.seed)


def student_role(config: RunConfig, student: ModelFolder) -> RoleConfig:
    s = config.preferences.student
    if s.provider == "openai":
        return RoleConfig(provider="openai", model=s.model, base_url=s.base_url,
                          api_key_env=s.api_key_env, max_concurrency=s.max_concurrency,
                          default_max_tokens=s.max_tokens)
    role = RoleConfig(provider="local", model=str(student.path), batch_size=s.batch_size,
                      dtype=s.dtype, device=s.device, max_concurrency=s.max_concurrency,
                      default_max_tokens=s.max_tokens)
    return native_role(role, student.path, cache_dir=config.llm.cache_dir,
                       chat_template=s.chat_template)


async def student_candidates(config: RunConfig, records: Sequence[ScenarioRecord],
                             catalog: EnvironmentCatalog, reward: RewardModel, *,
                             role: RoleConfig,
                             on_progress: Progress | None = None
                             ) -> tuple[list[Candidate], dict[str, Any]]:
    """k sampled rollouts of the student per training scenario, verified and scored."""
    s = config.preferences.student
    settings = student_settings(config)
    chosen = spread([r for r in records if r.split == "train"], s.max_scenarios, config.seed)

    def frame(gateway: ChatGateway, record: ScenarioRecord, group: str) -> Framing:
        scenario = record.scenario
        tools = scenario_tools(catalog, scenario.environment, lang=scenario.lang if
                               config.synthesis.tool_descriptions == "request" else None)
        policy = NativePolicy(gateway, "student", tools, settings, STAGE)
        # Framed as the student's SFT rows are (and as evaluate frames the scenario).
        system = None if config.synthesis.system_prompt == "template" else system_message(
            benchmark_template(config.synthesis.system_prompt), scenario.request, tools,
            lang=scenario.lang, now=record.now)
        return Framing(group, policy, system, tools)

    trials = await run_closed_loop(
        chosen, ["native"], frame, role=role, llm=config.llm, catalog=catalog,
        tools=config.environments.tools, verifier=config.verifier, settings=settings, stage=STAGE,
        on_progress=on_progress)
    out: list[Candidate] = []
    for case in trials:
        record, done = case.record, case.trial
        rollout = from_messages(done.messages) if needs_rollout(reward) else None
        score = reward.score(done.verdict, scenario=record.scenario, rollout=rollout)
        out.append(Candidate(
            id=f"{record.scenario.id}.s{done.trial}", source="student",
            scenario_id=record.scenario.id, kind=record.scenario.kind,
            lang=record.scenario.lang, messages=done.messages, tools=case.tools,
            reward=score.total, components=_components(done.verdict, score.terms)))
    passed = sum(bool(case.trial.verdict.passed) for case in trials)
    out.sort(key=lambda c: c.id)
    return out, {"scenarios": len(chosen), "rollouts": len(out), "passed": passed}


def dataset_rows(store: ArtifactStore, inputs: PreferenceInputs) -> list[dict[str, Any]]:
    """The sft_dataset's rows (none when none is read)."""
    if inputs.dataset is None:
        return []
    return list(Dataset(store.read_arrow(inputs.dataset)))


def pair(config: RunConfig, candidates: Sequence[Candidate],
         dataset: Sequence[Mapping[str, Any]] = ()) -> PairBuild:
    """The pairs of the scored trajectories, then the decision pairs of the sft_dataset rows
    ``dataset`` (none made twice)."""
    cfg = config.preferences
    built = build_pairs(candidates, min_margin=cfg.min_margin,
                        max_pairs_per_scenario=cfg.max_pairs_per_scenario,
                        val_ratio=cfg.val_ratio, seed=config.seed)
    decisions = decision_pairs(dataset, [c for c in candidates if c.source == ATTEMPTS],
                               val_ratio=cfg.val_ratio, seed=config.seed,
                               known=map(pair_key, built.rows), mirror=cfg.mirror_flips)
    built.rows += decisions.rows
    built.decisions.update(decisions.counts)
    return built


def summary_rows(stats: Mapping[str, Any], student: Mapping[str, Any] | None
                 ) -> list[dict[str, Any]]:
    """The run summary's rows from ``PairBuild.stats()``."""
    rows: list[dict[str, Any]] = [{"metric": "pairs", "value": stats["pairs"]}]
    rows += [{"metric": f"candidates ({source})", "value": n}
             for source, n in sorted(stats["candidates"].items())]
    if student:
        rows.append({"metric": "student rollouts passed",
                     "value": f"{student['passed']}/{student['rollouts']}"})
    rows += [{"metric": f"pairs from {source}", "value": n}
             for source, n in stats["by_source"].items()]
    rows += [{"metric": f"pairs of kind {kind}", "value": n}
             for kind, n in stats["by_kind"].items()]
    rows += [{"metric": f"decision pairs: {what}", "value": n}
             for what, n in stats["decisions"].items()]
    rows += [{"metric": f"skipped: {reason}", "value": n}
             for reason, n in stats["skipped"].items()]
    rows += [{"metric": f"margin {b['margin']}", "value": b["pairs"]}
             for b in stats["margin_histogram"]]
    return rows


def plot_margins(margins: Sequence[float], path: Path, *, title: str) -> Path:
    """The margin histogram as a PNG (the run's artifact beside the table)."""
    with png_figure(path, size=(6, 3.5), title=title, ylabel="pairs",
                    xlabel="reward margin (chosen - rejected)") as ax:
        ax.hist(list(margins) or [0.0], bins=20, color="#4c72b0")
    return path
