"""Seed query inputs: every format reads the same rows; every bad row names file, row, field."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentune.paths import PROJECT_ROOT
from agentune.tasks.collect_queries.seed_queries import (
    SeedQuery,
    check_tool_hints,
    load_seed_queries,
)
from agentune.tasks.common.input_files import InputError

ROWS = [
    {"text": "明天北京会下雨吗？", "scenario": "weather", "tools": ["get_weather"]},
    {"text": "Write a haiku about autumn.", "scenario": "no_tool", "tools": []},
    {"text": "What is 2 + 2?", "scenario": None, "tools": None},
]


def _content(queries: list[SeedQuery]) -> list[tuple[str, str, str | None, tuple[str, ...] | None]]:
    return [(q.id, q.text, q.scenario, q.tool_hints) for q in queries]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def write_csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(["text", "scenario", "tools"])
        for r in rows:
            tools = "" if r["tools"] is None else json.dumps(r["tools"])
            writer.writerow([r["text"], r["scenario"] or "", tools])
    return path


@pytest.fixture(params=["jsonl", "json", "csv", "tsv", "parquet", "hf", "hf_dict"])
def seed_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    kind = request.param
    if kind == "jsonl":
        return write_jsonl(tmp_path / "q.jsonl", ROWS)
    if kind == "json":
        path = tmp_path / "q.json"
        path.write_text(json.dumps(ROWS, ensure_ascii=False), "utf-8")
        return path
    if kind in ("csv", "tsv"):
        return write_csv(tmp_path / f"q.{kind}", ROWS, "," if kind == "csv" else "\t")
    table = pa.Table.from_pylist(
        ROWS,
        schema=pa.schema(
            [("text", pa.string()), ("scenario", pa.string()), ("tools", pa.list_(pa.string()))]
        ),
    )
    if kind == "parquet":
        path = tmp_path / "q.parquet"
        pq.write_table(table, path)
        return path
    ds = datasets.Dataset(table)
    path = tmp_path / "hf"
    if kind == "hf":
        ds.save_to_disk(str(path))
    else:
        datasets.DatasetDict({"train": ds}).save_to_disk(str(path))
    return path


def test_every_format_reads_the_same_queries(seed_file: Path) -> None:
    queries = load_seed_queries(seed_file)
    reference = load_seed_queries(write_jsonl(seed_file.parent / "ref.jsonl", ROWS))
    assert _content(queries) == _content(reference)
    assert queries[0].tool_hints == ("get_weather",)
    assert queries[1].tool_hints == ()  # no tool needed
    assert queries[2].tool_hints is None and queries[2].scenario is None  # unknown
    assert all(q.source == str(seed_file) for q in queries)


def test_row_locations_follow_each_format(tmp_path: Path) -> None:
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text("\n" + json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n", "utf-8")
    assert [q.row for q in load_seed_queries(jsonl)] == ["line 2", "line 4"]
    assert [q.row for q in load_seed_queries(write_csv(tmp_path / "q.csv", ROWS))] == [
        "line 2",
        "line 3",
        "line 4",
    ]
    path = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    assert [q.row for q in load_seed_queries(path)] == ["row 0", "row 1", "row 2"]


def test_csv_hint_cells(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text(
        "text,tools\n"
        "a query,get_weather;web_search\n"
        "b query,[]\n"
        "c query,\n"
        "d query,calculator\n"
        'e query,"[""run_python""]"\n',
        "utf-8",
    )
    hints = [q.tool_hints for q in load_seed_queries(path)]
    assert hints == [("get_weather", "web_search"), (), None, ("calculator",), ("run_python",)]


def test_configurable_columns_and_ids(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [
            {"question": "first question", "topic": "t1", "needs": ["a"], "qid": 7},
            {"question": "second question", "topic": "t2", "needs": [], "qid": "q8"},
        ],
    )
    queries = load_seed_queries(
        path, text_column="question", scenario_column="topic", tools_column="needs", id_column="qid"
    )
    assert [(q.id, q.text, q.scenario, q.tool_hints) for q in queries] == [
        ("7", "first question", "t1", ("a",)),
        ("q8", "second question", "t2", ()),
    ]


def test_generated_ids_depend_on_text_not_order(tmp_path: Path) -> None:
    rows = [{"text": "alpha query"}, {"text": "beta query"}, {"text": "alpha query"}]
    forward = load_seed_queries(write_jsonl(tmp_path / "f.jsonl", rows))
    backward = load_seed_queries(write_jsonl(tmp_path / "b.jsonl", rows[::-1]))
    assert forward[1].id == backward[1].id  # "beta" has the same id either way
    assert forward[0].id == backward[0].id  # the first "alpha" too
    assert forward[0].id.startswith("q-") and forward[2].id == forward[0].id + "-2"
    assert len({q.id for q in forward}) == 3


def test_hf_dataset_dict_needs_a_split_when_it_has_several(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_list([{"text": "one query"}])
    path = tmp_path / "hf"
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(path))
    with pytest.raises(
        InputError, match=r"split None not found; the splits are \['test', 'train'\]"
    ):
        load_seed_queries(path)
    assert [q.text for q in load_seed_queries(path, split="test")] == ["one query"]


def test_demo_queries_are_valid_and_varied() -> None:
    queries = load_seed_queries(PROJECT_ROOT / "data" / "demo" / "queries.jsonl")
    assert len(queries) >= 130
    scenarios = {q.scenario for q in queries}
    assert len(scenarios) >= 8
    langs = {"zh" if any("\u4e00" <= ch <= "\u9fff" for ch in q.text) else "en" for q in queries}
    assert langs == {"zh", "en"}
    assert any(q.tool_hints == () for q in queries)  # "no tool needed" cases


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("lines", "row", "field", "problem"),
    [
        (['{"text": "ok query"}', "{not json"], "line 2", None, "not valid JSON"),
        (['{"text": "ok query"}', '["a list"]'], "line 2", None, "a row must be an object"),
        (['{"text": "ok query"}', '{"scenario": "x"}'], "line 2", "text", "missing"),
        (['{"text": null}'], "line 1", "text", "is null"),
        (['{"text": 42}'], "line 1", "text", "must be a string, got int"),
        (['{"text": "ok query", "scenario": 3}'], "line 1", "scenario", "must be a string"),
        (['{"text": "ok query", "tools": "web_search"}'], "line 1", "tools", "must be a list"),
        (['{"text": "ok query", "tools": ["a", ""]}'], "line 1", "tools[1]", "non-empty tool name"),
        (['{"text": "ok query", "id": [1]}'], "line 1", "id", "string or integer"),
        (
            ['{"text": "one query", "id": "a"}', '{"text": "two query", "id": "a"}'],
            "line 2",
            "id",
            "duplicate id 'a' (first at line 1)",
        ),
    ],
)
def test_jsonl_errors_name_file_row_field(
    tmp_path: Path, lines: list[str], row: str, field: str | None, problem: str
) -> None:
    path = tmp_path / "seeds.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(InputError) as info:
        load_seed_queries(path)
    err = info.value
    assert (err.file, err.row, err.field) == (str(path), row, field)
    assert problem in str(err)
    assert str(path) in str(err) and row in str(err)
    if field:
        assert f"field {field!r}" in str(err)


def test_csv_errors(tmp_path: Path) -> None:
    path = tmp_path / "seeds.csv"
    path.write_text("text,tools\nfine query,\nbad query,a,b,c\n", "utf-8")
    with pytest.raises(InputError, match=r"seeds\.csv: line 3: 4 cells but the header has 2"):
        load_seed_queries(path)
    path.write_text('text,tools\nfine query,"[oops"\n', "utf-8")
    with pytest.raises(InputError, match=r"line 2: field 'tools': not a valid JSON list"):
        load_seed_queries(path)
    path.write_text("question\nfine query\n", "utf-8")
    with pytest.raises(InputError, match=r"line 2: field 'text': missing"):
        load_seed_queries(path)


def test_parquet_errors(tmp_path: Path) -> None:
    path = tmp_path / "seeds.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "q"}]), path)
    with pytest.raises(
        InputError,
        match=r"seeds\.parquet: field 'text': column not found; the columns are \['question'\]",
    ):
        load_seed_queries(path)
    pq.write_table(pa.Table.from_pylist([{"text": "fine query"}, {"text": None}]), path)
    with pytest.raises(InputError, match=r"seeds\.parquet: row 1: field 'text': is null"):
        load_seed_queries(path)
    path.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        load_seed_queries(path)


def test_hf_folder_errors(tmp_path: Path) -> None:
    path = tmp_path / "hf"
    datasets.Dataset.from_list([{"question": "q"}]).save_to_disk(str(path))
    with pytest.raises(InputError, match=r"hf: field 'text': column not found"):
        load_seed_queries(path)
    datasets.Dataset.from_list([{"text": "fine query", "tools": "x"}]).save_to_disk(
        str(tmp_path / "hf2")
    )
    with pytest.raises(InputError, match=r"hf2: row 0: field 'tools': must be a list"):
        load_seed_queries(tmp_path / "hf2")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="not a Hugging Face datasets folder"):
        load_seed_queries(tmp_path / "plain")


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.jsonl: file not found"):
        load_seed_queries(tmp_path / "missing.jsonl")
    (tmp_path / "q.xlsx").write_bytes(b"")
    with pytest.raises(InputError, match="unsupported format '.xlsx'"):
        load_seed_queries(tmp_path / "q.xlsx")
    (tmp_path / "empty.jsonl").write_text("\n", "utf-8")
    with pytest.raises(InputError, match=r"empty\.jsonl: no rows"):
        load_seed_queries(tmp_path / "empty.jsonl")
    (tmp_path / "obj.json").write_text('{"a": 1}', "utf-8")
    with pytest.raises(InputError, match="must hold a list"):
        load_seed_queries(tmp_path / "obj.json")


def test_unknown_tool_hint_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [
            {"text": "fine query", "tools": ["get_weather"]},
            {"text": "other", "tools": ["web_serch"]},
        ],
    )
    queries = load_seed_queries(path)
    with pytest.raises(InputError) as info:
        check_tool_hints(queries, ["get_weather", "web_search"])
    assert (info.value.row, info.value.field) == ("line 2", "tools[0]")
    assert "did you mean 'web_search'?" in str(info.value)
    check_tool_hints(queries, ["get_weather", "web_serch"])  # no error when all are known
