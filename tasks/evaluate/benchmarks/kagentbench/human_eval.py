"""Human evaluation (MAT's manual check of usable answers): a blind review sheet out, the filled sheet back in.

The sheet samples benchmark prompts and lists every model's answer to each as its own row, in a
shuffled order and without the model's name (``item_id`` is an opaque hash); reviewers fill
``score`` with the rubric below and may add a ``comment``. It is written as CSV (UTF-8 with a BOM,
so spreadsheet programs show Chinese text) and Parquet. Importing checks every row against the
items the predictions hold and names the file, row and field of anything wrong; a blank score is
a row not reviewed yet. The usable rate is the share of reviewed answers scored 4 or 5.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from agentune.tasks.evaluate.benchmarks.kagentbench.format import PLANNING_TYPES, BenchSample

RUBRIC: dict[int, str] = {
    5: "Completely correct.",
    4: "Minor deviations: the core information is accurate, under 10% of the supporting "
       "information is wrong.",
    3: "The core information is accurate, but 10-60% of the supporting information is wrong.",
    2: "The core information is wrong, or over 60% of the content has errors.",
    1: "Major inaccuracies in the core information; most or all of the content is wrong.",
    0: "Violation (harmful, illegal or otherwise unacceptable content): vetoed whatever else.",
}
USABLE = (4, 5)
SHEET_COLUMNS = ("item_id", "suite", "sample_id", "type", "template", "lang", "query",
                 "reference", "answer", "score", "comment")


class ReviewSheetError(ValueError):
    """A filled sheet that cannot be imported; names the file, row and field."""


@dataclass(frozen=True)
class ReviewItem:
    """One answer to review, and (kept out of the sheet) whose answer it is."""

    item_id: str
    model: str
    suite: str
    sample: BenchSample
    key: str
    answer: str

    def sheet_row(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "suite": self.suite, "sample_id": str(self.sample.id),
                "type": self.sample.type, "template": self.key,
                "lang": self.sample.lang or "", "query": self.sample.query,
                "reference": reference_text(self.sample), "answer": self.answer,
                "score": None, "comment": ""}


def item_id(suite: str, sample: BenchSample, key: str, model: str) -> str:
    blob = json.dumps([suite, sample.type, str(sample.id), key, model], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def reference_text(sample: BenchSample) -> str:
    """The first golden answer, as a reviewer reads it."""
    if not sample.goldens:
        return ""
    golden = sample.goldens[0]
    if sample.type in PLANNING_TYPES:
        args = json.dumps(golden.tool_args, ensure_ascii=False)
        return f"{golden.thought}\n-> {golden.tool_name} {args}"
    return str(golden.result)


def _answers(sample: BenchSample) -> dict[str, str]:
    if isinstance(sample.prediction, dict):
        return {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                for k, v in sample.prediction.items()}
    return {"prompt": sample.prediction or ""}


def review_items(predictions: Mapping[str, Mapping[str, Sequence[BenchSample]]]
                 ) -> list[ReviewItem]:
    """Every answer that could be reviewed: ``predictions[suite][model]`` -> prediction samples."""
    items = []
    for suite, by_model in predictions.items():
        for model, samples in by_model.items():
            for sample in samples:
                for key, answer in _answers(sample).items():
                    items.append(ReviewItem(item_id(suite, sample, key, model), model, suite,
                                            sample, key, answer))
    return items


def review_sheet(items: Sequence[ReviewItem], sample_size: int, seed: int) -> pd.DataFrame:
    """``sample_size`` prompts answered by every model, one blind row per answer, shuffled."""
    prompts: dict[tuple[str, str, str, str], list[ReviewItem]] = {}
    for item in items:
        prompts.setdefault((item.suite, item.sample.type, str(item.sample.id), item.key),
                           []).append(item)
    models = {item.model for item in items}
    complete = sorted(k for k, v in prompts.items() if {i.model for i in v} == models)
    rng = random.Random(seed)
    chosen = rng.sample(complete, min(sample_size, len(complete)))
    rows = [item.sheet_row() for key in chosen for item in prompts[key]]
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=list(SHEET_COLUMNS))


def write_review_sheet(sheet: pd.DataFrame, folder: Path) -> dict[str, Path]:
    """``review_sheet.csv``, ``review_sheet.parquet`` and ``review_rubric.md`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "review_sheet.csv"
    parquet_path = folder / "review_sheet.parquet"
    rubric_path = folder / "review_rubric.md"
    # Every field quoted: pandas leaves a field with a bare carriage return (a model may write
    # one) unquoted, and every CSV reader then splits the row there.
    sheet.to_csv(csv_path, index=False, encoding="utf-8-sig", quoting=csv.QUOTE_ALL)
    sheet.astype({"score": "Int64"}).to_parquet(parquet_path, index=False)
    rubric_path.write_text(rubric_markdown(), encoding="utf-8")
    return {"review_sheet.csv": csv_path, "review_sheet.parquet": parquet_path,
            "review_rubric.md": rubric_path}


def rubric_markdown() -> str:
    lines = ["# Review rubric", "",
             "Fill `score` for every row: compare `answer` with the request (`query`) and the "
             "`reference` answer. Answers scored 4 or 5 count as usable.", "",
             "| score | meaning |", "|---|---|"]
    lines += [f"| {score} | {text} |" for score, text in RUBRIC.items()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Review:
    item_id: str
    model: str
    score: int | None
    """None: not reviewed yet."""


def _read_sheet(path: Path) -> tuple[pd.DataFrame, int]:
    """The sheet, and what to add to a row index to get the row number a user sees."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig"), 2
        if suffix == ".parquet":
            return pd.read_parquet(path), 1
    except FileNotFoundError:
        raise ReviewSheetError(f"{path}: file not found") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ReviewSheetError(f"{path}: cannot be read: {exc}") from None
    raise ReviewSheetError(f"{path}: a review sheet is a .csv or .parquet file")


def _score(value: Any, where: str) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    text = str(value).strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not number.is_integer() or not 0 <= number <= 5:
        raise ReviewSheetError(f"{where}: field 'score': {text!r} is not a score: use 1-5 "
                               "(4-5 usable) or 0 for a violation, or leave it blank")
    return int(number)


def read_reviews(path: str | Path, items: Sequence[ReviewItem]) -> list[Review]:
    """A filled sheet, validated against the answers it was sampled from."""
    path = Path(path)
    sheet, first_row = _read_sheet(path)
    for column in ("item_id", "score"):
        if column not in sheet.columns:
            raise ReviewSheetError(f"{path}: column {column!r} missing (a review sheet has "
                                   f"{', '.join(SHEET_COLUMNS)})")
    models = {item.item_id: item.model for item in items}
    reviews, seen = [], {}
    for index, (raw_id, raw_score) in enumerate(zip(sheet["item_id"], sheet["score"], strict=True)):
        where = f"{path}: row {index + first_row}"
        key = str(raw_id).strip()
        if key not in models:
            raise ReviewSheetError(f"{where}: field 'item_id': {key!r} is not an answer of "
                                   "this evaluation (was the sheet exported from another run?)")
        if key in seen:
            raise ReviewSheetError(f"{where}: field 'item_id': {key!r} is also on row "
                                   f"{seen[key]}")
        seen[key] = index + first_row
        reviews.append(Review(key, models[key], _score(raw_score, where)))
    return reviews


def usable_rates(reviews: Sequence[Review]) -> dict[str, dict[str, float | int | None]]:
    """Per model: reviewed answers, usable rate (4-5), violations (0) and mean score."""
    summary: dict[str, dict[str, float | int | None]] = {}
    for model in sorted({r.model for r in reviews}):
        scores = [r.score for r in reviews if r.model == model and r.score is not None]
        summary[model] = {
            "reviewed": len(scores),
            "pending": sum(1 for r in reviews if r.model == model and r.score is None),
            "usable_rate": (sum(s in USABLE for s in scores) / len(scores)) if scores else None,
            "violations": sum(s == 0 for s in scores),
            "mean_score": (sum(scores) / len(scores)) if scores else None,
        }
    return summary
