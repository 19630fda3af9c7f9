"""The evaluate stage's work as plain functions, in the order the flow runs them.

1. :func:`models.resolve_models`: each listed model as a gateway role.
2. Each benchmark of :data:`benchmarks.BENCHMARKS` run on every model (``Benchmark.run``): its
   versions published, or reused when the same inputs were run.
3. :func:`build_report`: each benchmark's part of the report, in that order, with what was not
   evaluated, published as ``eval_report`` (the rows, ``report.md`` and each part's files).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.config import RunConfig
from agentune.tasks.evaluate.benchmark import BenchmarkRun
from agentune.tasks.store.artifact_store import ArtifactStore, Manifest

REPORT_ARTIFACT = "eval_report"


@dataclass
class EvaluationReport:
    manifest: Manifest
    rows: list[dict[str, Any]]
    markdown: str
    summary: list[dict[str, Any]]
    """The run summary: every benchmark's rows."""
    tables: list[tuple[str, list[dict[str, Any]], str]]
    """The run-summary tables of their own: key, rows, description."""


def build_report(config: RunConfig, store: ArtifactStore, runs: Sequence[BenchmarkRun[Any]],
                 skipped: Sequence[str]) -> EvaluationReport:
    """``skipped``: the models left out, and why; the benchmarks' own notes follow them."""
    notes = [*skipped, *(note for run in runs for note in run.notes)]
    sections = [run.benchmark.section(config, run.result, notes) for run in runs]
    rows = [row for s in sections for row in s.rows]
    markdown = "\n\n".join(s.markdown for s in sections if s.markdown)
    with tempfile.TemporaryDirectory(prefix="agentune-eval-") as tmp:
        folder = Path(tmp)
        (folder / "report.md").write_text(markdown + "\n", encoding="utf-8")
        files = {"report.md": folder / "report.md"}
        for run, section in zip(runs, sections, strict=True):
            files |= run.benchmark.figures(config, run.result, section, folder)
        manifest = store.publish(
            REPORT_ARTIFACT, rows, parents=[ref for s in sections for ref in s.parents],
            params={**{k: v for s in sections for k, v in s.params.items()}, "skipped": notes},
            stats={**{k: v for s in sections for k, v in s.stats.items()}, "skipped": notes},
            files=files,
            description="evaluation: KAgentBench scores and tool-use metrics per model, "
            "template source and language; report.md, comparison.png, review sheet")
    tables = [(s.table[0], s.summary, s.table[1]) for s in sections if s.table and s.summary]
    return EvaluationReport(manifest, rows, markdown, [r for s in sections for r in s.summary],
                            tables)
