"""The closed-loop part of the comparison report: pass@1 / pass^k / reward per model, broken
down by split, kind, language, environment and template group; the format-sensitivity table;
why trials failed; and one PNG (pass@1 per kind, a bar per model) to read at a glance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentune.tasks.common.figures import png_figure
from agentune.tasks.evaluate.presentation import grouped_bars, percent
from agentune.tasks.rollouts.closed_loop import BREAKDOWNS, ClosedLoopScores, rates


def closed_loop_markdown(scores: ClosedLoopScores, form: str) -> str:
    """Markdown tables, the first model being the baseline of the others."""
    models = list(dict.fromkeys(r["model"] for r in scores.rows))
    if not models:
        return ""
    table = scores.table()
    lines = [f"### Closed loop ({form} form): the model acts, the verifier scores",
             "", "| model | cases | pass@1 | pass^k | reward |", "|---|---|---|---|---|"]
    for row in (r for r in table if r["by"] == "all"):
        lines.append(f"| {row['model']} | {row['cases']} | {percent(row['pass@1'])} | "
                     f"{percent(row['pass^k'])} | {row['reward']:.3f} |")
    lines += ["", "pass@1 (x100) by " + ", ".join(BREAKDOWNS) + ":", "",
              "| by | value | " + " | ".join(models) + " |",
              "|---|---|" + "---|" * len(models)]
    cells = {(r["by"], r["value"], r["model"]): r for r in table}
    for by in BREAKDOWNS:
        for value in sorted({r["value"] for r in table if r["by"] == by}):
            row = [percent(cells[(by, value, m)]["pass@1"]) if (by, value, m) in cells else "-"
                   for m in models]
            cases = next(cells[(by, value, m)]["cases"] for m in models
                         if (by, value, m) in cells)
            lines.append(f"| {by} | {value} (n={cases}) | " + " | ".join(row) + " |")
    sensitivity = scores.sensitivity()
    if sensitivity:
        lines += ["", "Format sensitivity: pass@1 (x100) across template groups on the same "
                  "scenarios (lower spread is better):", "",
                  "| model | groups | mean | std | max delta |", "|---|---|---|---|---|"]
        lines += [f"| {s['model']} | {s['groups']} | {percent(s['mean'])} | {percent(s['std'])} | "
                  f"{percent(s['max_delta'])} |" for s in sensitivity]
    lines += ["", "Why trials failed (verifier reasons, count):", "",
              "| model | reasons |", "|---|---|"]
    for model in models:
        reasons = Counter(reason for r in scores.rows if r["model"] == model and not r["passed"]
                          for reason in r["reasons"] or ["(none given)"])
        text = ", ".join(f"{k} {n}" for k, n in reasons.most_common(8)) or "none failed"
        lines.append(f"| {model} | {text} |")
    return "\n".join(lines)


def closed_loop_rows(scores: ClosedLoopScores, form: str) -> list[dict[str, Any]]:
    """The rates in the report's long format (suite ``closed_loop:FORM``)."""
    return [{"suite": f"closed_loop:{form}", "model": entry["model"], "view": entry["by"],
             "group": entry["value"], "metric": metric, "value": entry[metric], "std": None,
             "n": entry["cases"], "partial": False}
            for entry in scores.table() for metric in ("pass@1", "pass^k", "reward")]


def closed_loop_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per model and split: cases, pass@1, pass^k, reward (for the run summary)."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        for split in ["all", *sorted({r["split"] for r in mine})]:
            part = mine if split == "all" else [r for r in mine if r["split"] == split]
            out.append({"model": model, "split": split, **rates(part)})
    return out


def plot_closed_loop(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars: pass@1 per scenario kind (and overall), a bar per model."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    kinds = ["all", *sorted({r["kind"] for r in rows})]
    series = {}
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        series[model] = [100 * (rates(mine if k == "all" else [r for r in mine if r["kind"] == k])
                                ["pass@1"] or 0.0) for k in kinds]
    with png_figure(path, size=(max(6.0, 1.1 * len(kinds) + 2), 4)) as ax:
        grouped_bars(ax, kinds, series, label_format=".0f", ylabel="pass@1 x100", title=title,
                     rotation=20)
        ax.set_ylim(0, 110)
    return path
