"""What a benchmark supplies to the evaluate stage.

The stage (``stage.py``) does what every benchmark shares: the models, the report version
(``eval_report``: the rows, ``report.md`` and the files beside it) and what was not evaluated. A
benchmark (``benchmarks.BENCHMARKS``, in report order) supplies what is its own: what every model
is run on, running every model on it (its versions published or reused), its part of the report,
and the figures of that part. Its settings are a section of ``agentune/config/evaluate.py``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from agentune.config import RunConfig
from agentune.tasks.evaluate.models import ResolvedModel
from agentune.tasks.rollouts.driver import Progress
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest, VersionRef

PlanT = TypeVar("PlanT")
ResultT = TypeVar("ResultT")


class Log(Protocol):
    """Where a benchmark's progress lines go (the flow's run logger)."""

    def info(self, msg: str, *args: Any) -> None: ...


class Version(Protocol):
    """A version a benchmark published, or found published and reused."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def reused(self) -> bool: ...


@dataclass
class BenchmarkRun(Generic[ResultT]):
    """What running a benchmark left."""

    benchmark: Benchmark[Any, ResultT]
    result: ResultT
    versions: Mapping[str, Version] = field(default_factory=dict)
    """By output name (``eval_rollouts:messages:base`` ...), in the order they were made."""
    notes: list[str] = field(default_factory=list)
    """What it could not evaluate, and why (the report's "Not evaluated")."""
    usage: list[dict[str, Any]] = field(default_factory=list)
    """LLM usage rows of the work done now (not of reused versions)."""

    @property
    def reused(self) -> bool:
        return all(v.reused for v in self.versions.values())


@dataclass
class Section:
    """A benchmark's part of the ``eval_report`` version."""

    rows: list[dict[str, Any]]
    """Long format: suite, model, view, group, metric, value (0-1), std, n, partial."""
    markdown: str
    """Its part of report.md ("": none)."""
    summary: list[dict[str, Any]] = field(default_factory=list)
    """Its rows of the run summary."""
    stats: dict[str, Any] = field(default_factory=dict)
    """Its entries of the version's stats."""
    params: dict[str, Any] = field(default_factory=dict)
    """Its entries of the version's params: what decides the report besides its parents."""
    parents: list[VersionRef] = field(default_factory=list)
    table: tuple[str, str] | None = None
    """The run-summary rows as a Prefect table of their own: its key (after ``evaluate-``) and
    description; shown when there are rows."""


class Benchmark(ABC, Generic[PlanT, ResultT]):
    """One benchmark of the evaluate stage."""

    name: str
    """Its name in the Prefect UI."""

    @abstractmethod
    def prepare(self, config: RunConfig, store: ArtifactStore) -> PlanT:
        """What every model is run on, before the models are resolved (the suites published,
        the cases read ...)."""

    @abstractmethod
    async def run(self, config: RunConfig, store: ArtifactStore, plan: PlanT,
                  models: Sequence[ResolvedModel], log: Log) -> BenchmarkRun[ResultT]:
        """Every model on it, as its settings say (nothing when it is off): each version
        published, or reused when the same inputs were run."""

    @abstractmethod
    def section(self, config: RunConfig, result: ResultT, notes: Sequence[str]) -> Section:
        """Its part of the report. ``notes``: everything the run did not evaluate."""

    def figures(self, config: RunConfig, result: ResultT, section: Section,
                folder: Path) -> dict[str, Path]:
        """The files its part of the report carries (PNGs, sheets), written into ``folder``;
        by their names under the report's ``__files__/``."""
        return {}


def progress_log(log: Log, prefix: str, started: str, step: str) -> Progress:
    """A progress reporter writing a line when the work starts (``started``, formatted with
    ``total``) and one per tenth done (``step``, with ``done``, ``total`` and ``rate``: per
    second since the start), each after ``prefix``."""
    began, tenths = [0.0], [0]

    async def progress(done: int, total: int) -> None:
        if done == 0:
            began[0] = time.perf_counter()
            log.info(prefix + started.format(total=total))
        elif done * 10 // total > tenths[0]:
            tenths[0] = done * 10 // total
            rate = done / max(time.perf_counter() - began[0], 1e-9)
            log.info(prefix + step.format(done=done, total=total, rate=rate))

    return progress
