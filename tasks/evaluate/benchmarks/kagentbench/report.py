"""The comparison report: every model's scores side by side, per dimension, per template source
(benchmark / meta-agent / unseen) and per language, with the tool-use metrics and, when a
reviewed sheet was imported, the human usable rate.

Three forms of one set of numbers: long-format rows (the ``eval_report`` table, one row per suite
x model x view x group x metric), a markdown summary (also the Prefect run summary) and a PNG
bar chart. The first model listed is the baseline the others are compared with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentune.tasks.common.figures import png_figure
from agentune.tasks.evaluate.benchmarks.kagentbench.scoring import (
    DIMENSIONS,
    LABELS,
    ItemScore,
    KAgentBenchResult,
    aggregate,
)
from agentune.tasks.evaluate.benchmarks.kagentbench.tool_metrics import (
    TOOL_METRICS,
    MetricValue,
    summarise,
)
from agentune.tasks.evaluate.presentation import grouped_bars

SCORE_NAMES = (*DIMENSIONS, "overall")
TEMPLATE_GROUPS = ("benchmark", "meta-agent", "unseen")


@dataclass
class ModelScores:
    suite: str
    model: str
    result: KAgentBenchResult
    tool_values: list[MetricValue]
    failures: int = 0
    """Prompts the model could not answer (scored as empty answers)."""


@dataclass
class ComparisonReport:
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    """One row per suite x model: the six numbers x100 (and the usable rate)."""
    markdown: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _View:
    name: str
    group: str
    keep_item: Callable[[ItemScore], bool] | None
    keep_value: Callable[[MetricValue], bool] | None


def _views(scores: ModelScores) -> list[_View]:
    views = [_View("all", "all", None, None)]
    groups = sorted({i.template_group for i in scores.result.items if i.template_group},
                    key=lambda g: (TEMPLATE_GROUPS.index(g) if g in TEMPLATE_GROUPS else 9, g))
    for group in groups:
        views.append(_View("template_source", group,
                           lambda i, g=group: i.template_group == g,
                           lambda v, g=group: v.template_group == g))
    for lang in sorted({i.lang for i in scores.result.items}):
        views.append(_View("lang", lang, lambda i, g=lang: i.lang == g,
                           lambda v, g=lang: v.lang == g))
    return views


def report_rows(scores: Sequence[ModelScores]) -> list[dict[str, Any]]:
    """Long-format rows: suite, model, view, group, metric, value (0-1), std, n, partial."""
    rows: list[dict[str, Any]] = []
    for entry in scores:
        for view in _views(entry):
            dims = aggregate(entry.result.items, view.keep_item)
            for name in SCORE_NAMES:
                n = dims.samples[name] if name in dims.samples else sum(dims.samples.values())
                rows.append({"suite": entry.suite, "model": entry.model, "view": view.name,
                             "group": view.group, "metric": name, "value": dims.values[name],
                             "std": None, "n": n,
                             "partial": dims.partial if name == "overall" else False})
            for name, summary in summarise(entry.tool_values, view.keep_value).items():
                rows.append({"suite": entry.suite, "model": entry.model, "view": view.name,
                             "group": view.group, "metric": name, "value": summary.mean,
                             "std": summary.std, "n": summary.count, "partial": False})
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _delta(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "-"
    return f"{100 * (value - base):+.2f}"


def _lookup(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str, str, str], Any]:
    return {(r["suite"], r["model"], r["view"], r["group"], r["metric"]): r for r in rows}


def comparison(scores: Sequence[ModelScores], *, human: Mapping[str, Mapping[str, Any]] | None,
               skipped: Sequence[str] = (), title: str = "evaluate") -> ComparisonReport:
    """The rows, the per-model summary and the markdown report."""
    rows = report_rows(scores)
    table = _lookup(rows)
    suites = list(dict.fromkeys(s.suite for s in scores))
    models = list(dict.fromkeys(s.model for s in scores))
    human = human or {}
    summary = []
    lines = [f"## {title}: {' vs '.join(models)}", ""]
    for suite in suites:
        present = [m for m in models if (suite, m, "all", "all", "overall") in table]
        entries = {s.model: s for s in scores if s.suite == suite}
        first = entries[present[0]].result
        types = Counter(key[0] for key in dict.fromkeys(i.sample.key for i in first.items))
        lines += [f"### {suite} (text format: each template as a plain prompt, no tools; "
                  "one step at a time, teacher-forced)", "",
                  f"{sum(types.values())} samples ("
                  + ", ".join(f"{t} {n}" for t, n in sorted(types.items())) + f"), "
                  f"{len(first.items)} prompts per model; parser `{first.options.parser}`, "
                  f"quirks `{first.options.quirks}`, tokenizer `{first.tokenizer}`.", ""]
        header = ["model", *(LABELS[n] for n in SCORE_NAMES)]
        with_human = any(m in human for m in present)
        if with_human:
            header.append("usable (human)")
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for model in present:
            values = {n: table[(suite, model, "all", "all", n)]["value"] for n in SCORE_NAMES}
            cells = [model, *(_pct(values[n]) for n in SCORE_NAMES)]
            row = {"suite": suite, "model": model,
                   **{LABELS[n]: None if values[n] is None else round(100 * values[n], 2)
                      for n in SCORE_NAMES}}
            if with_human:
                rate = human.get(model, {}).get("usable_rate")
                reviewed = human.get(model, {}).get("reviewed", 0)
                cells.append(f"{_pct(rate)} (n={reviewed})")
                row["usable (human)"] = None if rate is None else round(100 * rate, 2)
            lines.append("| " + " | ".join(cells) + " |")
            summary.append(row)
        base = present[0]
        for model in present[1:]:
            cells = [f"{model} − {base}", *(
                _delta(table[(suite, model, "all", "all", n)]["value"],
                       table[(suite, base, "all", "all", n)]["value"]) for n in SCORE_NAMES)]
            lines.append("| " + " | ".join(cells) + (" | |" if with_human else " |"))
        lines += _group_tables(suite, present, table, "template_source",
                               "by template source (unseen: never used in training)")
        lines += _group_tables(suite, present, table, "lang", "by language")
        lines += ["", "#### tool-use metrics (mean x100, std, n)", "",
                  "| model | " + " | ".join(TOOL_METRICS) + " |", "|" + "---|" * 6]
        for model in present:
            cells = []
            for metric in TOOL_METRICS:
                row = table[(suite, model, "all", "all", metric)]
                cells.append("-" if row["value"] is None else
                             f"{_pct(row['value'])} ± {_pct(row['std'])} (n={row['n']})")
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        notes = [f"{s.model}: {s.failures} prompt(s) got no answer (scored as empty)"
                 for s in entries.values() if s.failures]
        notes += [f"{s.model}: official-script quirks met: " + ", ".join(
            f"{k}={v}" for k, v in sorted(s.result.anomalies.items()))
            for s in entries.values() if s.result.anomalies]
        if notes:
            lines += ["", *(f"- {n}" for n in notes)]
        lines.append("")
    if skipped:
        lines += ["Not evaluated:", *(f"- {s}" for s in skipped), ""]
    lines.append("Scores x100. Overall = 0.25 Planning + 0.35 Tool-use + 0.10 Reflection + "
                 "0.20 Concluding + 0.10 Profile; `*` = over the dimensions present, weights "
                 "renormalised. See docs/KAGENTBENCH_SCORING.md.")
    return ComparisonReport(rows, summary, "\n".join(lines), list(skipped))


def _group_tables(suite: str, models: Sequence[str],
                  table: Mapping[tuple[str, str, str, str, str], Any], view: str,
                  title: str) -> list[str]:
    groups = list(dict.fromkeys(k[3] for k in table if k[0] == suite and k[2] == view))
    if not groups:
        return []
    names = [n for n in SCORE_NAMES if any(
        table[(suite, m, view, g, n)]["value"] is not None for m in models for g in groups
        if (suite, m, view, g, n) in table)]
    lines = ["", f"#### {title}", "",
             "| model | group | " + " | ".join(LABELS[n] for n in names) + " |",
             "|" + "---|" * (len(names) + 2)]
    for group in groups:
        for model in models:
            key = (suite, model, view, group, "overall")
            if key not in table:
                continue
            cells = []
            for name in names:
                row = table[(suite, model, view, group, name)]
                mark = "*" if name == "overall" and row["partial"] else ""
                cells.append(_pct(row["value"]) + mark)
            lines.append(f"| {model} | {group} | " + " | ".join(cells) + " |")
    return lines


def plot_comparison(summary: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars: the six numbers per model (``ComparisonReport.summary``), one panel per
    suite."""
    suites = list(dict.fromkeys(r["suite"] for r in summary))
    names = [LABELS[n] for n in SCORE_NAMES]
    with png_figure(path, size=(9, 3.8 * len(suites)), panels=len(suites)) as axes:
        for ax, suite in zip(axes, suites, strict=True):
            rows = [r for r in summary if r["suite"] == suite]
            grouped_bars(ax, names, {row["model"]: [row[n] or 0.0 for n in names] for row in rows},
                         label_format=".1f", ylabel="score x100", title=f"{title}: {suite}")
            highest = max((row[n] or 0.0 for row in rows for n in names), default=0.0)
            ax.set_ylim(0, max(10.0, highest * 1.15))  # scores are 0-100; room for the labels
    return path
