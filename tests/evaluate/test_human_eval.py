"""Human evaluation: a blind review sheet out (CSV + Parquet), the filled sheet back in with
validation, and the usable rate (scores 4-5) per model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentune.tasks.evaluate.benchmarks.kagentbench.format import SourceLine, parse_sample
from agentune.tasks.evaluate.benchmarks.kagentbench.human_eval import (
    SHEET_COLUMNS,
    ReviewSheetError,
    read_reviews,
    review_items,
    review_sheet,
    usable_rates,
    write_review_sheet,
)


def _predictions(model: str) -> list[Any]:
    lines = []
    for i in range(6):
        lines.append({"id": f"c{i}", "query": f"问题 {i}", "type": "conclusion", "lang": "zh",
                      "golden_result_list": [{"golden_result": f"答案 {i}"}],
                      "prompt_input": {"ReACT": "p", "AutoGPT": "p"},
                      "model_predict": {"ReACT": f"{model} 回答 {i}",
                                        "AutoGPT": f"{model} answer {i}"}})
    lines.append({"id": "p0", "query": "Who are you?", "type": "profile",
                  "golden_result_list": [{"golden_result": "An assistant."}],
                  "prompt_input": {"prompt": "Who are you?"}, "model_predict": f"{model} here"})
    return [parse_sample(line, SourceLine("preds", n), with_prediction=True)
            for n, line in enumerate(lines, 1)]


@pytest.fixture
def items() -> list[Any]:
    return review_items({"heldout": {"base": _predictions("base"),
                                     "tuned": _predictions("tuned")}})


def test_sheet_is_blind_paired_and_written_as_csv_and_parquet(items, tmp_path: Path) -> None:
    sheet = review_sheet(items, sample_size=4, seed=0)
    assert list(sheet.columns) == list(SHEET_COLUMNS)
    assert len(sheet) == 8  # 4 prompts x 2 models
    assert "model" not in sheet.columns
    assert not sheet["answer"].str.contains("model").any()
    pairs = sheet.groupby(["sample_id", "template"]).size()
    assert (pairs == 2).all()  # every sampled prompt answered by both models
    assert sheet["score"].isna().all()
    files = write_review_sheet(sheet, tmp_path)
    assert set(files) == {"review_sheet.csv", "review_sheet.parquet", "review_rubric.md"}
    assert files["review_sheet.csv"].read_bytes().startswith(b"\xef\xbb\xbf")  # Excel-friendly
    assert pd.read_parquet(files["review_sheet.parquet"])["query"].tolist() == \
        sheet["query"].tolist()
    assert "| 0 |" in files["review_rubric.md"].read_text(encoding="utf-8")
    # Same seed, same sheet.
    assert review_sheet(items, sample_size=4, seed=0).equals(sheet)


def test_answers_with_any_line_breaks_keep_their_rows_in_the_csv(items, tmp_path: Path) -> None:
    """A model's answer may hold bare carriage returns (a random-weight model wrote
    "\\r\\r\\r..."): the CSV keeps one row per answer and the text as it was."""
    sheet = review_sheet(items, sample_size=3, seed=0)
    odd = ["\r\r\r\ufffd", "line\rbreak", "a\r\nb", "\n\n", "q\r", 'say "hi", then\r']
    sheet["answer"] = odd
    path = write_review_sheet(sheet, tmp_path)["review_sheet.csv"]
    back = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    assert back["answer"].tolist() == odd and back["item_id"].tolist() == \
        sheet["item_id"].tolist()
    reviews = read_reviews(path, items)  # one pending review per answer, none misread
    assert [r.item_id for r in reviews] == sheet["item_id"].tolist()
    assert all(r.score is None for r in reviews)


def _fill(sheet: pd.DataFrame, items: list[Any], scores: dict[str, Any]) -> pd.DataFrame:
    models = {i.item_id: i.model for i in items}
    filled = sheet.copy()
    filled["score"] = [scores[models[item]] for item in filled["item_id"]]
    return filled


def test_round_trip_through_csv_gives_the_usable_rate(items, tmp_path: Path) -> None:
    sheet = review_sheet(items, sample_size=5, seed=1)
    filled = _fill(sheet, items, {"base": "3", "tuned": "5"})
    filled.loc[filled.index[0], "score"] = ""  # one row not reviewed yet
    path = tmp_path / "filled.csv"
    filled.to_csv(path, index=False, encoding="utf-8-sig")  # as a spreadsheet saves it
    rates = usable_rates(read_reviews(path, items))
    reviewed = {m: 5 - (m == _model_of(items, filled["item_id"].iloc[0])) for m in rates}
    assert rates["tuned"]["usable_rate"] == 1.0 and rates["base"]["usable_rate"] == 0.0
    for model in ("base", "tuned"):
        assert rates[model]["reviewed"] == reviewed[model]
        assert rates[model]["pending"] == 5 - reviewed[model]
    assert rates["tuned"]["mean_score"] == 5.0


def _model_of(items: list[Any], item_id: str) -> str:
    return next(i.model for i in items if i.item_id == item_id)


def test_round_trip_through_parquet_with_violations(items, tmp_path: Path) -> None:
    sheet = review_sheet(items, sample_size=6, seed=2)
    filled = _fill(sheet, items, {"base": 4, "tuned": 0})
    path = tmp_path / "filled.parquet"
    filled.astype({"score": "Int64"}).to_parquet(path)
    rates = usable_rates(read_reviews(path, items))
    assert rates["base"]["usable_rate"] == 1.0
    assert rates["tuned"]["violations"] == 6 and rates["tuned"]["usable_rate"] == 0.0


@pytest.mark.parametrize(("change", "message"), [
    ({"score": "6"}, r"row 2: field 'score': '6' is not a score"),
    ({"score": "good"}, r"row 2: field 'score': 'good' is not a score"),
    ({"score": "4.5"}, r"row 2: field 'score': '4.5' is not a score"),
    ({"item_id": "deadbeef"}, r"row 2: field 'item_id': 'deadbeef' is not an answer"),
])
def test_bad_rows_are_errors_naming_file_row_and_field(items, tmp_path: Path, change,
                                                       message) -> None:
    sheet = _fill(review_sheet(items, sample_size=2, seed=0), items, {"base": 4, "tuned": 4})
    for column, value in change.items():
        sheet[column] = sheet[column].astype(object)
        sheet.loc[sheet.index[0], column] = value
    path = tmp_path / "filled.csv"
    sheet.to_csv(path, index=False)
    with pytest.raises(ReviewSheetError, match=message):
        read_reviews(path, items)


def test_duplicate_rows_and_missing_columns_are_errors(items, tmp_path: Path) -> None:
    sheet = _fill(review_sheet(items, sample_size=2, seed=0), items, {"base": 4, "tuned": 4})
    doubled = pd.concat([sheet, sheet.iloc[:1]])
    doubled.to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ReviewSheetError, match=r"dup.csv: row 6: field 'item_id'.*also on row 2"):
        read_reviews(tmp_path / "dup.csv", items)
    sheet.drop(columns=["score"]).to_csv(tmp_path / "cols.csv", index=False)
    with pytest.raises(ReviewSheetError, match=r"cols.csv: column 'score' missing"):
        read_reviews(tmp_path / "cols.csv", items)
    with pytest.raises(ReviewSheetError, match="a review sheet is a .csv or .parquet"):
        read_reviews(tmp_path / "sheet.xlsx", items)
