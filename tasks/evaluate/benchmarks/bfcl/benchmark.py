"""BFCL as a benchmark: every model on the same seeded subset (``run.py``), the report's table
(``report.py``); a note in the report, not a failed flow, when bfcl-eval's venv is missing or its
scorer fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agentune.config import RunConfig
from agentune.tasks.evaluate.benchmark import Benchmark, BenchmarkRun, Log, Section, progress_log
from agentune.tasks.evaluate.benchmarks.bfcl.report import bfcl_markdown, bfcl_rows, bfcl_summary
from agentune.tasks.evaluate.benchmarks.bfcl.run import BfclRun, bfcl_suite, run_bfcl_model
from agentune.tasks.evaluate.benchmarks.bfcl.worker import BfclUnavailable, bfcl_python
from agentune.tasks.evaluate.models import ResolvedModel, asked_natively
from agentune.tasks.store.artifact_store import ArtifactStore


class Bfcl(Benchmark[None, list[BfclRun]]):
    name = "bfcl"

    def prepare(self, config: RunConfig, store: ArtifactStore) -> None:
        """Nothing: the subset is drawn when the models are run, bfcl-eval's venv present."""

    async def run(self, config: RunConfig, store: ArtifactStore, plan: None,
                  models: Sequence[ResolvedModel], log: Log) -> BenchmarkRun[list[BfclRun]]:
        if not config.evaluate.bfcl.enabled:
            return BenchmarkRun(self, [])
        try:
            python = bfcl_python(config.evaluate.bfcl.python)
            suite = await asyncio.to_thread(bfcl_suite, config, python)
        except BfclUnavailable as exc:
            return BenchmarkRun(self, [], notes=[f"BFCL: {exc}"])
        runs, notes = [], []
        for model in models:
            role, identity = (asked_natively(config, model) if suite.mode == "fc"
                              else (model.role, model.identity))
            progress = progress_log(log, f"{model.label} on BFCL: ", "{total} entries",
                                    "{done}/{total} entries answered")
            try:
                runs.append(await run_bfcl_model(
                    config, store, label=model.label, role=role, identity=identity,
                    parent=model.parent, suite=suite, python=python, on_progress=progress))
            except BfclUnavailable as exc:
                notes.append(f"BFCL, {model.label}: {exc}")
        return BenchmarkRun(self, runs, {f"eval_bfcl:{r.model}": r for r in runs}, notes)

    def section(self, config: RunConfig, result: list[BfclRun], notes: Sequence[str]) -> Section:
        summary = bfcl_summary(result)
        return Section(bfcl_rows(result), bfcl_markdown(result), summary,
                       stats={"bfcl": summary}, parents=[r.manifest.ref for r in result],
                       table=("bfcl", "BFCL accuracy per model and category (bfcl-eval's own "
                              "scorer)"))
