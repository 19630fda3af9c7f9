"""The BFCL part of the comparison report: accuracy per category, a column per model (the first
is the baseline), BFCL's own summary columns, and rows for the report table and run summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentune.tasks.evaluate.benchmarks.bfcl.run import BfclRun
from agentune.tasks.evaluate.benchmarks.bfcl.scoring import SUMMARY_COLUMNS
from agentune.tasks.evaluate.presentation import percent


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bfcl_summary(runs: Sequence[BfclRun]) -> list[dict[str, Any]]:
    """One row per model and category (and ``mean``, unweighted over the categories run)."""
    out = []
    for run in runs:
        cats = run.categories
        for c in cats:
            out.append({"model": run.model, "bfcl_category": c["category"],
                        "accuracy": c["accuracy"], "correct": c["correct"], "n": c["total"]})
        out.append({"model": run.model, "bfcl_category": "mean",
                    "accuracy": _mean([c["accuracy"] for c in cats]),
                    "correct": sum(c["correct"] for c in cats),
                    "n": sum(c["total"] for c in cats)})
    return out


def bfcl_rows(runs: Sequence[BfclRun]) -> list[dict[str, Any]]:
    """The report's long format: suite ``bfcl:<mode>``, view ``category``."""
    return [{"suite": f"bfcl:{run.manifest.stats.get('mode', 'prompt')}", "model": row["model"],
             "view": "category" if row["bfcl_category"] != "mean" else "all",
             "group": row["bfcl_category"], "metric": "accuracy", "value": row["accuracy"],
             "std": None, "n": row["n"], "partial": True}
            for run in runs for row in bfcl_summary([run])]


def bfcl_markdown(runs: Sequence[BfclRun]) -> str:
    if not runs:
        return ""
    models = [r.model for r in runs]
    base = models[0]
    mode = runs[0].manifest.stats.get("mode", "prompt")
    cells = {(r["model"], r["bfcl_category"]): r for r in bfcl_summary(runs)}
    categories = list(dict.fromkeys(c["category"] for r in runs for c in r.categories))
    head = ["category", "n", *models, *(f"{m} − {base}" for m in models[1:])]
    lines = [f"### BFCL v4 ({mode} mode), scored by bfcl-eval's own `bfcl evaluate`", "",
             "Accuracy x100 on a fixed seeded subset of each category (`--partial-eval`): "
             "not comparable one-to-one with the public leaderboard, which runs every entry.",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for category in [*categories, "mean"]:
        values = [cells.get((m, category), {}).get("accuracy") for m in models]
        n = next((cells[(m, category)]["n"] for m in models if (m, category) in cells), 0)
        diffs = [percent(v - values[0]) if v is not None and values[0] is not None else "-"
                 for v in values[1:]]
        label = "mean (unweighted)" if category == "mean" else category
        row = [label, str(n), *(percent(v) for v in values), *diffs]
        lines.append("| " + " | ".join(row) + " |")
    summaries = [(r.model, r.summary) for r in runs if r.summary]
    if summaries:
        lines += ["", "BFCL's own summary columns (data_overall.csv; categories not run count "
                  "as 0 or N/A there, as BFCL computes them):", "",
                  "| model | " + " | ".join(SUMMARY_COLUMNS) + " |",
                  "|---|" + "---|" * len(SUMMARY_COLUMNS)]
        lines += [f"| {model} | " + " | ".join(s.get(k, "-") for k in SUMMARY_COLUMNS) + " |"
                  for model, s in summaries]
    errors = [(r.model, r.manifest.stats.get("model_errors", 0)) for r in runs]
    if any(n for _, n in errors):
        lines += ["", "Entries the model could not answer (gateway errors, forced quits): "
                  + ", ".join(f"{m} {n}" for m, n in errors)]
    return "\n".join(lines)
