"""synthesize as plain functions: the plan's combinations run through the agent loop concurrently,
each finished one checkpointed at once; then the ``trajectories`` rows, ``rejects`` rows and the
run summary, in plan order whatever order they finished in.

Endpoint faults: a trajectory whose teacher or judge call outlasted the gateway's retries ends
``*_unavailable`` (:data:`~agentune.tasks.synthesize.agent_loop.UNAVAILABLE`). Such an outcome is never
checkpointed: a run that stops (below, over budget, killed) asks for it again next time, and a run
that completes publishes it among the rejects with the fault as its detail. When
:data:`ENDPOINT_DOWN_STREAK` trajectories in a row (or every one this run started, if fewer) end
that way, the endpoint is taken to be down and the run stops with :class:`EndpointDown`,
publishing nothing. A stop (that, or ``BudgetExceeded``) cancels the trajectories in progress;
their answers so far are in the gateway's response cache, the finished ones in the checkpoint.

The flow (``flows/synthesize.py``) reads the inputs, samples the plan
(:mod:`agentune.tasks.synthesize.sampling`), calls :func:`synthesize_trajectories` and publishes
what :func:`assemble_synthesis` returns. Nothing here knows about the store; only the progress
reporting knows about Prefect.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from agentune.config import RunConfig
from agentune.config.tools import ToolsConfig
from agentune.tasks.agent.prompt_templates import AgentTemplate
from agentune.tasks.common.rejects import Reject, reason_counts
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.store.artifact_store import file_fingerprint
from agentune.tasks.synthesize import STAGE
from agentune.tasks.synthesize.agent_loop import (
    UNAVAILABLE,
    AgentLoop,
    LoopSettings,
    TrajectoryOutcome,
)
from agentune.tasks.synthesize.checkpoint import CheckpointRecord, SynthesisCheckpoint
from agentune.tasks.synthesize.progress import SynthesisProgress
from agentune.tasks.synthesize.sampling import Combination
from agentune.tasks.synthesize.trajectory_forms import trajectory_row
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor

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


def synthesis_params(config: RunConfig) -> dict[str, Any]:
    """What decides the outputs besides the input versions: the settings (not where checkpoints go
    or how many run at once), the document collection's contents, the seed, teacher and judge."""
    cfg = config.synthesis
    settings = cfg.model_dump(mode="json", exclude={"queries", "catalog", "templates", "work_dir",
                                                    "keep_checkpoints", "concurrency"})
    documents = Path(cfg.tools.documents)
    return {"settings": settings, "seed": config.seed,
            "documents_sha256": file_fingerprint(documents) if documents.is_dir() else None,
            **config.llm.identities("teacher", "judge")}


def checkpoint_dir(work_dir: str | Path, version: str) -> Path:
    return Path(work_dir) / version


def outcome_record(outcome: TrajectoryOutcome, tools: Mapping[str, ToolSpec],
                   teacher_model: str) -> CheckpointRecord:
    """A finished outcome as its checkpoint line: the row (if accepted), the rejects, the stats."""
    combo = outcome.combination
    rejects = [Reject(STAGE, f"{STEP_REJECT_PREFIX}{f.reason}",
                      f"{combo.id}/step{f.step}/attempt{f.attempt}",
                      f"{f.detail} | answer: {f.answer[:300]}").to_row()
               for f in outcome.failures]
    if not outcome.accepted:
        rejects.append(Reject(STAGE, outcome.reason or "rejected", combo.id,
                              f"{combo.template_id} x {combo.query_id} ({combo.task_type}): "
                              f"{outcome.detail}").to_row())
    errors = [c for c in outcome.calls if not c.observation.ok]
    stats = {
        "task_type": combo.task_type, "template_id": combo.template_id,
        "reason": outcome.reason, "retried": [f.reason for f in outcome.failures],
        "calls": len(outcome.calls), "tool_errors": len(errors),
        # A failed call followed by another step: the trajectory shows a change of course.
        "reflection": any(c.step < len(outcome.steps) - 1 for c in errors),
        "steps": len(outcome.steps), "repairs": outcome.repairs,
        "prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
        "judge_score": outcome.judge_score,
    }
    row = trajectory_row(outcome, tools, teacher_model) if outcome.accepted else None
    return CheckpointRecord(combo.id, outcome.accepted, row, rejects, stats)


async def synthesize_trajectories(plan: Sequence[Combination],
                                  templates: Mapping[str, AgentTemplate],
                                  tools: Mapping[str, ToolSpec], *, gateway: ChatGateway,
                                  tools_config: ToolsConfig, settings: LoopSettings,
                                  checkpoint: SynthesisCheckpoint, concurrency: int,
                                  teacher_model: str) -> dict[str, CheckpointRecord]:
    """Every combination of ``plan`` finished: those in the checkpoint are taken from it, the others
    run (``concurrency`` at once) and are checkpointed one by one as they finish."""
    records = checkpoint.load()
    pending = [c for c in plan if c.id not in records]
    progress = SynthesisProgress(len(plan), resumed=len(plan) - len(pending))
    await progress.start()
    if not pending:
        return records
    slots = asyncio.Semaphore(concurrency)
    down_after = min(ENDPOINT_DOWN_STREAK, len(pending))
    streak: list[TrajectoryOutcome] = []
    checkpointed = len(records)
    async with ToolExecutor(list(tools.values()), tools_config, gateway=gateway) as executor:
        loop = AgentLoop(gateway, executor, tools, settings)

        async def one(combo: Combination) -> None:
            nonlocal checkpointed
            async with slots:
                outcome = await loop.run(combo, templates[combo.template_id])
            record = outcome_record(outcome, tools, teacher_model)
            if outcome.reason in UNAVAILABLE:
                streak.append(outcome)
                if len(streak) >= down_after:
                    raise EndpointDown(
                        f"{STAGE} stopped: {len(streak)} trajectories in a row got no answer from "
                        f"the LLM endpoint; {checkpointed} finished trajectories are "
                        f"checkpointed in {checkpoint.path} and the next run resumes from there. "
                        f"Last error: {outcome.detail}")
            else:
                streak.clear()
                # In a worker thread: the fsync would otherwise stall every call in flight.
                await asyncio.to_thread(checkpoint.append, record)
                checkpointed += 1
            records[combo.id] = record
            await progress.advance(record.accepted)

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


@dataclass
class SynthesisResult:
    rows: list[dict[str, Any]]
    rejects: list[dict[str, str]]
    summary: list[dict[str, Any]]
    stats: dict[str, Any]


def assemble_synthesis(plan: Sequence[Combination],
                       records: Mapping[str, CheckpointRecord]) -> SynthesisResult:
    """Rows, rejects and summary in plan order; every combination must have finished."""
    missing = [c.id for c in plan if c.id not in records]
    if missing:
        raise ValueError(f"{len(missing)} combinations have not finished (e.g. {missing[0]})")
    ordered = [records[c.id] for c in plan]
    rows = [r.row for r in ordered if r.accepted and r.row is not None]
    rejects = [reject for r in ordered for reject in r.rejects]
    accepted = [r for r in ordered if r.accepted]
    rejected = [Reject(STAGE, r.stats.get("reason") or "rejected", r.id) for r in ordered
                if not r.accepted]
    retried = Counter(reason for r in ordered for reason in r.stats.get("retried", []))
    scores = [r.stats["judge_score"] for r in accepted if r.stats.get("judge_score") is not None]
    stats = {
        "planned_by_task_type": dict(Counter(c.task_type for c in plan)),
        "accepted_by_task_type": dict(Counter(r.stats["task_type"] for r in accepted)),
        "accepted_by_template": dict(Counter(r.stats["template_id"] for r in accepted)),
        "rejected_by_reason": reason_counts(rejected),
        "retried_steps_by_reason": dict(retried),
    }
    summary: list[dict[str, Any]] = [
        {"metric": "combinations", "value": len(plan)},
        {"metric": "queries", "value": len({c.query_id for c in plan})},
        {"metric": "templates", "value": len({c.template_id for c in plan})},
    ]
    summary += [{"metric": f"planned: {t}", "value": n}
                for t, n in sorted(stats["planned_by_task_type"].items())]
    summary += [{"metric": "trajectories accepted", "value": len(accepted)}]
    summary += [{"metric": f"accepted: {t}", "value": n}
                for t, n in sorted(stats["accepted_by_task_type"].items())]
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
    return SynthesisResult(rows, rejects, summary, stats)
