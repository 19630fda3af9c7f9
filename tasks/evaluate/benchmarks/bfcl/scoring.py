"""Scoring with BFCL's own ``bfcl evaluate``: result files written where it reads them, the
command run in its venv with the model name registered at run time, its score files read back.

Layout under a work folder (``BFCL_PROJECT_ROOT``)::

    result/<model, "/" as "_">/<non_live|live|multi_turn>/BFCL_v4_<category>_result.json
    score/<model, "/" as "_">/<...>/BFCL_v4_<category>_score.json   first line: accuracy,
                                                                   correct_count, total_count;
                                                                   then one line per failed entry
    score/data_overall.csv                                          BFCL's summary columns
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.tasks.evaluate.benchmarks.bfcl.generate import EntryAnswer, result_line
from agentune.tasks.evaluate.benchmarks.bfcl.worker import run_worker

VERSION_PREFIX = "BFCL_v4"
SUMMARY_COLUMNS = ("Overall Acc", "Non-Live AST Acc", "Live Acc", "Multi Turn Acc",
                   "Irrelevance Detection")


def bfcl_model_name(label: str) -> str:
    """A name BFCL accepts: ``agentune/<label>``, no ``_`` (BFCL maps ``_`` back to ``/``)."""
    return "agentune/" + re.sub(r"[^A-Za-z0-9.-]", "-", label)


def model_folder(name: str) -> str:
    return name.replace("/", "_")


def write_results(root: Path, name: str, answers: Sequence[EntryAnswer],
                  folders: Mapping[str, str]) -> dict[str, Path]:
    """One result file per category, entries in the given order; the paths by category."""
    paths: dict[str, Path] = {}
    for category in dict.fromkeys(a.category for a in answers):
        path = (root / "result" / model_folder(name) / folders[category]
                / f"{VERSION_PREFIX}_{category}_result.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(result_line(a) + "\n" for a in answers
                                if a.category == category), encoding="utf-8")
        paths[category] = path
    return paths


@dataclass
class CategoryScore:
    category: str
    accuracy: float
    correct: int
    total: int
    failed: dict[str, Any]
    """Failed entry id -> BFCL's error record for it."""


@dataclass
class BfclScores:
    categories: list[CategoryScore]
    summary: dict[str, str]
    """BFCL's own summary columns (data_overall.csv) for the model."""


def run_bfcl_evaluate(python: Path, root: Path, models: Sequence[Mapping[str, str]],
                      categories: Sequence[str], timeout_s: float) -> str:
    """``bfcl evaluate --partial-eval`` for ``models`` (``{"name", "mode"}``); its log."""
    spec = {"models": list(models), "categories": list(categories)}
    return run_worker(python, root, ["evaluate", json.dumps(spec)], timeout_s=timeout_s)


def read_scores(root: Path, name: str, categories: Sequence[str],
                folders: Mapping[str, str]) -> BfclScores:
    """BFCL's score files for ``name``; a category without one is an error naming the file."""
    scores = []
    for category in categories:
        path = (root / "score" / model_folder(name) / folders[category]
                / f"{VERSION_PREFIX}_{category}_score.json")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: bfcl evaluate wrote no score for {category}")
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        head = lines[0]
        failed = {str(item["id"]): item for item in lines[1:] if "id" in item}
        scores.append(CategoryScore(category, float(head["accuracy"]),
                                    int(head["correct_count"]), int(head["total_count"]),
                                    failed))
    return BfclScores(scores, read_summary(root / "score" / "data_overall.csv", name))


def read_summary(path: Path, name: str) -> dict[str, str]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("Model", "").startswith(name):
                return {k: row[k] for k in SUMMARY_COLUMNS if k in row}
    return {}
