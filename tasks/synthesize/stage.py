"""synthesize as plain functions: the plan's combinations run through the agent loop concurrently,
each finished one checkpointed at once; then the ``trajectories`` rows, ``rejects`` rows and the
run summary, in plan order whatever order they finished in.

Endpoint faults: a trajectory whose teacher or judge call outlasted the gateway's retries ends
``*_unavailable`` (:data:`~agentune.tasks.synthesize.agent_loop.UNAVAILABLE`). Such an outcome is never
checkpointed: a run that stops (below, over budget, killed) asks for it again next time, and a run
that completes publishes it among the rejects with the fault as its detail. When
:data:`ENDPOINT_DOWN_STREAK` trajectories in a row (or every one this run started, if fewer) end
that way, the endpoint is taken to be down and the run stops with :class:`EndpointDown`,
publishing nothing. A stop (that, or a ``RunStop``: the budget, an unloadable model) cancels the
trajectories in progress; their answers so far are in the gateway's response cache, the finished
ones in the checkpoint.

The flow (``flows/synthesize.py``) resolves the input versions (:func:`resolve_sources`), looks
the outputs up by them and :func:`synthesis_params`, reads the inputs (:func:`read_inputs`,
:func:`read_judged_rows`), samples the plan (:mod:`agentune.tasks.synthesize.sampling`), calls
:func:`synthesize_trajectories` and publishes what :func:`assemble_synthesis` returns. Only those
three functions know about the store; only the progress reporting knows about Prefect.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from statistics import fmean
from typing import Any

from agentune.config import RunConfig
from agentune.config.synthesize import READS, SynthesisConfig
from agentune.tasks.agent.prompt_templates import AgentTemplate
from agentune.tasks.common.rejects import Reject, reason_counts
from agentune.tasks.common.text_cleaning import ScrubResult
from agentune.tasks.environments.catalog import EnvironmentCatalog, fingerprint
from agentune.tasks.environments.scenarios import read_scenario_rows
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.store.artifact_store import ArtifactStore, VersionRef
from agentune.tasks.store.inputs import version_params
from agentune.tasks.synthesize import STAGE
from agentune.tasks.synthesize.agent_loop import (
    UNAVAILABLE,
    AgentLoop,
    TrajectoryOutcome,
    Verification,
)
from agentune.tasks.synthesize.checkpoint import CheckpointRecord, SynthesisCheckpoint
from agentune.tasks.synthesize.judged_instances import judged_instance_rows
from agentune.tasks.synthesize.native_loop import NativeLoop
from agentune.tasks.synthesize.pii import PiiAction, scrub_row
from agentune.tasks.synthesize.progress import SynthesisProgress
from agentune.tasks.synthesize.sampling import (
    Combination,
    SynthesisInputs,
    read_catalog,
    read_queries,
    read_templates,
)
from agentune.tasks.synthesize.trajectory_forms import (
    RowFraming,
    attempt_id,
    attempt_row,
    trajectory_row,
)
from agentune.tasks.tool_retrieval.candidates import CandidateRetrieval, candidate_retrieval
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.verifier.rollout import ask_user_tool

STEP_REJECT_PREFIX = "step_"
"""Prefix of the reasons of single step answers that could not be used (``step_invalid_args``
...; the step was asked again, or, after the last attempt, the trajectory was rejected), as
opposed to the reasons whole trajectories were rejected for."""


log = logging.getLogger(__name__)

ENDPOINT_DOWN_STREAK = 3
"""Trajectories ending ``*_unavailable`` one after the other (nothing else finishing between) that
stop the run. Each already outlasted the gateway's retries (``llm.<role>.max_retries`` with
backoff), so three in a row is an endpoint that is down, not a flaky request."""


class EndpointDown(RuntimeError):
    """The LLM endpoint stopped answering; the message names it, and the checkpoint to resume."""


@dataclass(frozen=True)
class SynthesisSources:
    """The versions synthesize reads, and the retrieval its ``retriever`` setting asks for."""

    queries: VersionRef
    catalog: VersionRef
    templates: VersionRef
    scenarios: VersionRef | None
    judgements: VersionRef | None
    retriever: VersionRef | None
    retrieval: CandidateRetrieval

    @property
    def parents(self) -> list[VersionRef]:
        found = (self.queries, self.catalog, self.templates, self.scenarios, self.judgements,
                 self.retriever)
        return [ref for ref in found if ref is not None]


def resolve_sources(config: RunConfig, store: ArtifactStore) -> SynthesisSources:
    cfg = config.synthesis
    queries, catalog = store.resolve(cfg.queries), store.resolve(cfg.catalog)
    templates = store.resolve(cfg.templates)
    scenarios = store.resolve(cfg.scenarios) if cfg.scenarios else None
    judgements = store.resolve(cfg.judgements) if cfg.judgements else None
    retrieval, retriever = candidate_retrieval(store, cfg.retriever)
    return SynthesisSources(queries, catalog, templates, scenarios, judgements, retriever,
                            retrieval)


def read_inputs(store: ArtifactStore, sources: SynthesisSources,
                catalog: EnvironmentCatalog) -> SynthesisInputs:
    """Queries, tools and templates, and the scenarios when a scenarios version is read."""
    ask = ask_user_tool()
    tools = read_catalog(store.read(sources.catalog), str(sources.catalog))
    scenarios = read_scenario_rows(store.read(sources.scenarios).to_dict("records"),
                                   str(sources.scenarios)) if sources.scenarios else []
    offered = {name: (*(t.name for t in catalog.offered_tools(name)), ask.name)
               for name in catalog.training()}
    return SynthesisInputs(
        queries=read_queries(store.read(sources.queries), str(sources.queries), tools),
        tools=tools,
        templates=read_templates(store.read(sources.templates), str(sources.templates)),
        scenarios=scenarios, offered=offered, retrieval=sources.retrieval,
        shared=frozenset(t.name for spec in catalog.environments.values()
                         if spec.shared for t in spec.tools),
        scenario_tools={**{t.name: t for t in catalog.training_tools()}, ask.name: ask})


def read_judged_rows(store: ArtifactStore, sources: SynthesisSources,
                     teacher_model: str) -> list[dict[str, Any]]:
    """The kept judged instances as one-step rows (none when no judgements version is read)."""
    if sources.judgements is None:
        return []
    return judged_instance_rows(store.read(sources.judgements).to_dict("records"), teacher_model)


def synthesis_params(config: RunConfig, catalog: EnvironmentCatalog) -> dict[str, Any]:
    """What decides the outputs besides the input versions: what the stage reads (``READS``:
    not where checkpoints go or how many run at once), the catalog as the environments' code."""
    return version_params(config, READS, {"environments.catalog": fingerprint(catalog)})


def checkpoint_dir(work_dir: str | Path, version: str) -> Path:
    return Path(work_dir) / version


def outcome_record(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                   teacher_model: str, system: str | None = None) -> CheckpointRecord:
    """A finished attempt as its checkpoint line: the row (if accepted), the rejects, the stats
    (and, for a verified attempt, its ``attempts`` row); ``system``: the rows' system message
    (None: the template's Profile)."""
    combo = outcome.combination
    ident = attempt_id(outcome)
    rejects = [Reject(STAGE, f"{STEP_REJECT_PREFIX}{f.reason}",
                      f"{ident}/step{f.step}/retry{f.attempt}",
                      f"{f.detail} | answer: {f.answer[:300]}").to_row()
               for f in outcome.failures]
    if not outcome.accepted:
        rejects.append(Reject(STAGE, outcome.reason or "rejected", ident,
                              f"{combo.template_id} x {combo.query_id} "
                              f"({combo.kind or combo.task_type}): {outcome.detail}").to_row())
    errors = [c for c in outcome.calls if not c.observation.ok]
    verdict = outcome.verdict
    stats = {
        "task_type": combo.task_type, "template_id": combo.template_id,
        "combination_id": combo.id, "scenario_id": combo.scenario_id, "kind": combo.kind,
        "attempt": outcome.attempt, "guided": outcome.guided, "reason": outcome.reason,
        "retried": [f.reason for f in outcome.failures],
        "calls": len(outcome.calls), "tool_errors": len(errors),
        # A failed call followed by another step: the trajectory shows a change of course.
        "reflection": any(c.step < len(outcome.steps) - 1 for c in errors),
        "steps": len(outcome.steps), "repairs": outcome.repairs,
        "prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
        "judge_score": outcome.judge_score,
        "reward": verdict.reward if verdict else None,
        "attempt_row": attempt_row(outcome, tools, system) if verdict else None,
    }
    row = trajectory_row(outcome, tools, teacher_model, system) if outcome.accepted else None
    return CheckpointRecord(ident, outcome.accepted, row, rejects, stats)


class _EndpointWatch:
    """Counts attempts ending ``*_unavailable`` one after the other; too many: the endpoint is
    down (see :data:`ENDPOINT_DOWN_STREAK`)."""

    def __init__(self, down_after: int, checkpoint: SynthesisCheckpoint) -> None:
        self.down_after = down_after
        self.checkpoint = checkpoint
        self.streak = 0
        self.checkpointed = 0

    def saw(self, outcome: TrajectoryOutcome) -> None:
        if outcome.reason not in UNAVAILABLE:
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.down_after:
            raise EndpointDown(
                f"{STAGE} stopped: {self.streak} trajectories in a row got no answer from the "
                f"LLM endpoint; {self.checkpointed} finished trajectories are checkpointed in "
                f"{self.checkpoint.path} and the next run resumes from there. Last error: "
                f"{outcome.detail}")


async def synthesize_trajectories(plan: Sequence[Combination],
                                  templates: Mapping[str, AgentTemplate],
                                  tools: Mapping[str, ToolSpec], *, executor: ToolExecutor,
                                  gateway: ChatGateway, settings: SynthesisConfig, seed: int,
                                  checkpoint: SynthesisCheckpoint, concurrency: int,
                                  teacher_model: str, attempts: int = 1,
                                  stop_at_first_pass: bool = True,
                                  verification: Verification | None = None,
                                  framing: RowFraming | None = None,
                                  ) -> dict[str, CheckpointRecord]:
    """Every combination of ``plan`` finished: a scenario combination up to ``attempts`` times
    (stopping at the first that passes, if so set), a plain query once. Attempts in the
    checkpoint are taken from it, the others run (``concurrency`` combinations at once) and are
    checkpointed one by one as they finish. ``framing``: the tools' descriptions (prompts and
    rows) and the rows' system message (default: as the catalog and the template write them)."""
    records = checkpoint.load()
    pending = [c for c in plan if not _finished(c, records, attempts, stop_at_first_pass)]
    progress = SynthesisProgress(
        len(plan), resumed=len(plan) - len(pending),
        attempts=sum(ident not in records
                     for c in pending for ident in _attempt_ids(c, attempts)))
    await progress.start()
    if not pending:
        return records
    slots = asyncio.Semaphore(concurrency)
    watch = _EndpointWatch(min(ENDPOINT_DOWN_STREAK, len(pending)), checkpoint)
    watch.checkpointed = len(records)
    framing = framing or RowFraming()
    loops: dict[str, AgentLoop] = {}  # one per language: its tools described in it

    def loop_for(combo: Combination) -> AgentLoop:
        if combo.lang not in loops:
            described = framing.tools(tools, combo.lang)
            loops[combo.lang] = NativeLoop(
                gateway, executor, described, settings, seed, verification, framing,
            ) if settings.form == "messages" else AgentLoop(
                gateway, executor, described, settings, seed, verification)
        return loops[combo.lang]

    def clock(combo: Combination) -> datetime:
        if combo.scenario_id is not None and verification is not None:
            return verification.scenarios[combo.scenario_id].now
        return settings.current_time

    async def one(combo: Combination) -> None:
        passed = False
        loop = loop_for(combo)
        idents = _attempt_ids(combo, attempts)
        for attempt, ident in enumerate(idents):
            if ident in records:
                passed = passed or records[ident].accepted
            else:
                async with slots:
                    outcome = await loop.run(combo, templates[combo.template_id], attempt)
                record = outcome_record(outcome, loop.tools, teacher_model,
                                        framing.system(outcome, loop.tools, clock(combo)))
                watch.saw(outcome)
                if outcome.reason not in UNAVAILABLE:
                    # In a worker thread: the fsync would otherwise stall every call in flight.
                    await asyncio.to_thread(checkpoint.append, record)
                    watch.checkpointed += 1
                records[ident] = record
                passed = passed or record.accepted
                await progress.attempted_one()
            if passed and stop_at_first_pass:
                break
        await progress.advance(passed, sum(i not in records for i in idents))

    # Everything alive now (the imported libraries, the inputs) outlives the calls: moved out
    # of the collector's sight for them, a full collection no longer walks millions of
    # objects, which stalled every call in flight for ~150 ms at 64 in flight
    # (tests/benchmarks/test_synthesis_throughput.py).
    gc.collect()
    gc.freeze()
    try:
        async with asyncio.TaskGroup() as tasks:  # one failure cancels the rest
            for combo in pending:
                tasks.create_task(one(combo))
    except ExceptionGroup as failures:
        first, *others = failures.exceptions
        for other in others:
            log.error("%s: also failed while stopping: %r", STAGE, other)
        # Raised as itself, so its message (the budget, the endpoint) reaches the user.
        raise first from None
    finally:
        gc.unfreeze()
    return records


def _attempt_ids(combo: Combination, attempts: int) -> list[str]:
    """The ids of a combination's attempts (a plain query has one)."""
    if combo.scenario_id is None:
        return [combo.id]
    return [f"{combo.id}.a{k}" for k in range(attempts)]


def _finished(combo: Combination, records: Mapping[str, CheckpointRecord], attempts: int,
              stop_at_first_pass: bool) -> bool:
    """Whether a combination needs no more attempts: all made, or one passed when stopping at
    the first pass."""
    done = [records[i] for i in _attempt_ids(combo, attempts) if i in records]
    if stop_at_first_pass and any(r.accepted for r in done):
        return True
    return len(done) == len(_attempt_ids(combo, attempts))


@dataclass
class SynthesisResult:
    rows: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    rejects: list[dict[str, str]]
    summary: list[dict[str, Any]]
    stats: dict[str, Any]


def pass_at_k(records: Sequence[CheckpointRecord]) -> dict[str, Any]:
    """pass@k and pass^k at the scenario level (over all its templates' unguided attempts: what
    the teacher finds alone): the share of scenarios with at least one passing attempt, and with
    every attempt passing; per kind too."""
    by_scenario: dict[str, list[bool]] = {}
    kind_of: dict[str, str] = {}
    for r in records:
        sid = r.stats.get("scenario_id")
        if sid is None or r.stats.get("attempt_row") is None or r.stats.get("guided"):
            continue
        by_scenario.setdefault(sid, []).append(r.accepted)
        kind_of[sid] = r.stats.get("kind") or ""

    def rates(ids: Sequence[str]) -> dict[str, Any]:
        return {"scenarios": len(ids),
                "pass@k": round(fmean(any(by_scenario[i]) for i in ids), 4) if ids else None,
                "pass^k": round(fmean(all(by_scenario[i]) for i in ids), 4) if ids else None,
                "attempts": sum(len(by_scenario[i]) for i in ids)}

    kinds = sorted(set(kind_of.values()))
    return {"all": rates(list(by_scenario)),
            **{k: rates([i for i in by_scenario if kind_of[i] == k]) for k in kinds}}


def _without_pii(rows: Sequence[dict[str, Any]], action: PiiAction,
                 rejects: list[dict[str, str]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows scrubbed (or, for ``drop``, those with PII rejected as ``pii``), and what was found."""
    if action == "off":
        return list(rows), {"action": action}
    kept: list[dict[str, Any]] = []
    found: Counter[str] = Counter()
    touched = 0
    seen: dict[str, ScrubResult] = {}
    for row in rows:
        scrubbed, kinds = scrub_row(row, seen)
        found.update(kinds)
        touched += bool(kinds)
        if kinds and action == "drop":
            rejects.append(Reject(STAGE, "pii", row["id"],
                                  f"personal data in the trajectory: {kinds}").to_row())
            continue
        kept.append(scrubbed if action == "scrub" else row)
    return kept, {"action": action, "rows_with_pii": touched, "placeholders": dict(found)}


def assemble_synthesis(plan: Sequence[Combination], records: Mapping[str, CheckpointRecord], *,
                       attempts: int = 1, stop_at_first_pass: bool = True,
                       pii_action: PiiAction = "scrub",
                       judged_rows: Sequence[dict[str, Any]] = ()) -> SynthesisResult:
    """Rows (the plan's, then the kept judged instances'), attempts, rejects and summary in plan
    order; every combination must have finished."""
    missing = [c.id for c in plan if not _finished(c, records, attempts, stop_at_first_pass)]
    if missing:
        raise ValueError(f"{len(missing)} combinations have not finished (e.g. {missing[0]})")
    ordered = [records[i] for c in plan for i in _attempt_ids(c, attempts) if i in records]
    rejects = [reject for r in ordered for reject in r.rejects]
    rows, pii = _without_pii([r.row for r in ordered if r.accepted and r.row is not None]
                             + list(judged_rows), pii_action, rejects)
    attempt_rows, _ = _without_pii([r.stats["attempt_row"] for r in ordered
                                    if r.stats.get("attempt_row")],
                                   "scrub" if pii_action != "off" else "off", [])
    accepted = [r for r in ordered if r.accepted]
    rejected = [Reject(STAGE, r.stats.get("reason") or "rejected", r.id) for r in ordered
                if not r.accepted]
    retried = Counter(reason for r in ordered for reason in r.stats.get("retried", []))
    scores = [r.stats["judge_score"] for r in accepted if r.stats.get("judge_score") is not None]
    passing = pass_at_k(ordered)
    guided = [r for r in ordered if r.stats.get("guided")]
    stats = {
        "planned_by_task_type": dict(Counter(c.task_type for c in plan)),
        "accepted_by_task_type": dict(Counter(r.stats["task_type"] for r in accepted)),
        "accepted_by_kind": dict(Counter(r.stats.get("kind") or "query" for r in accepted)),
        "accepted_by_template": dict(Counter(r.stats["template_id"] for r in accepted)),
        "rejected_by_reason": reason_counts(rejected),
        "retried_steps_by_reason": dict(retried),
        "pass_at_k": passing,
        "verified": sum(1 for r in accepted if r.stats.get("scenario_id")),
        "guided": {"attempts": len(guided), "passed": sum(r.accepted for r in guided)},
        "pii": pii,
    }
    summary: list[dict[str, Any]] = [
        {"metric": "combinations", "value": len(plan)},
        {"metric": "attempts", "value": len(ordered)},
        {"metric": "scenarios", "value": len({c.scenario_id for c in plan if c.scenario_id})},
        {"metric": "queries", "value": len({c.query_id for c in plan if not c.scenario_id})},
        {"metric": "templates", "value": len({c.template_id for c in plan})},
    ]
    summary += [{"metric": f"planned: {t}", "value": n}
                for t, n in sorted(stats["planned_by_task_type"].items())]
    summary += [{"metric": "trajectories accepted", "value": len(accepted)},
                {"metric": "trajectories verified", "value": stats["verified"]},
                {"metric": "judged instances kept (unverified)", "value": len(judged_rows)}]
    if guided:
        summary += [{"metric": "guided attempts", "value": len(guided)},
                    {"metric": "guided attempts passed", "value": stats["guided"]["passed"]}]
    summary += [{"metric": f"accepted: {t}", "value": n}
                for t, n in sorted(stats["accepted_by_kind"].items())]
    summary += [{"metric": f"pass@k {kind} ({v['scenarios']} scenarios)", "value": v["pass@k"]}
                for kind, v in passing.items() if v["scenarios"]]
    summary += [{"metric": f"pass^k {kind}", "value": v["pass^k"]}
                for kind, v in passing.items() if v["scenarios"]]
    summary += [{"metric": "trajectories with personal data "
                 f"({pii['action']})", "value": pii.get("rows_with_pii", 0)}]
    summary += [{"metric": "trajectories rejected", "value": len(rejected)}]
    summary += [{"metric": f"rejected: {reason}", "value": n}
                for reason, n in stats["rejected_by_reason"].items()]
    summary += [{"metric": f"step answers dropped: {reason}", "value": n}
                for reason, n in sorted(retried.items())]
    summary += [
        {"metric": "tool calls (accepted)", "value": sum(r.stats["calls"] for r in accepted)},
        {"metric": "tool errors seen (accepted)",
         "value": sum(r.stats["tool_errors"] for r in accepted)},
        {"metric": "reflection trajectories (accepted)",
         "value": sum(bool(r.stats["reflection"]) for r in accepted)},
        {"metric": "mean steps (accepted)",
         "value": round(fmean(r.stats["steps"] for r in accepted), 2) if accepted else 0},
        {"metric": "mean judge score (accepted)", "value": round(fmean(scores), 2) if scores
         else None},
        {"metric": "teacher prompt tokens",
         "value": sum(r.stats["prompt_tokens"] for r in ordered)},
        {"metric": "teacher completion tokens",
         "value": sum(r.stats["completion_tokens"] for r in ordered)},
    ]
    return SynthesisResult(rows, attempt_rows, rejects, summary, stats)
