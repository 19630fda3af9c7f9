"""Seed queries from JSONL, JSON, CSV/TSV, Parquet or a Hugging Face ``datasets`` folder.

Every row is checked on its own; a row that cannot be used raises :class:`InputError` naming the
file, the row and the field, before anything is written. Rows are located the way a person looks
them up: ``line N`` in text formats (JSONL, CSV; the CSV header is line 1), ``row N`` (0-based, as
``df.iloc[N]`` / ``dataset[N]``) in Parquet and datasets folders, ``item N`` in a JSON array.

Text files must be UTF-8 (a BOM is allowed): other bytes are an error naming the line and the byte
offset, never silently replaced (see :func:`utf8_lines`). CSV is read strictly, so a stray quote is
an error at the row it opens instead of a cell that swallows the rest of the file.

Content problems that cleaning can judge (an empty text, a text too long) are not errors here:
they become rejects later, so one bad row of a large file does not stop a run.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """An input that cannot be used; the message names the file, the row and the field."""

    def __init__(self, file: str | Path, row: str | None, field: str | None, problem: str) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.problem = problem
        where = [self.file]
        if row is not None:
            where.append(row)
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join(where)}: {problem}")


@dataclass(frozen=True)
class SeedQuery:
    """One validated input row."""

    id: str
    text: str
    scenario: str | None
    tool_hints: tuple[str, ...] | None
    """Tools the query needs: ``None`` when unknown, ``()`` when it needs none."""
    source: str
    """File the row came from."""
    row: str
    """Where in the file, e.g. ``line 12`` or ``row 11``."""


# --------------------------------------------------------------------------- raw rows


def utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file, line ends kept, a leading BOM dropped.

    Bytes that are not UTF-8 are an :class:`InputError` naming the line and the byte offset:
    decoding them with replacement characters would put mojibake into training data without
    anyone noticing (a GBK/GB18030 export is the usual cause; the message says how to convert).
    """
    offset = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw, offset = raw[3:], 3
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise not_utf8(path, lineno, offset + exc.start, exc) from None
            offset += len(raw)


def decode_utf8(path: Path, data: bytes) -> str:
    """A whole file's bytes as text (BOM dropped); not UTF-8 is an error as in :func:`utf8_lines`."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start = bom + exc.start
        raise not_utf8(path, data.count(b"\n", 0, start) + 1, start, exc) from None


def not_utf8(path: Path, lineno: int, byte: int, exc: UnicodeDecodeError) -> InputError:
    bad = exc.object[exc.start : exc.start + 4].hex(" ")
    return InputError(
        path,
        f"line {lineno}",
        None,
        f"not valid UTF-8 at byte offset {byte} (bytes {bad}: {exc.reason}); save the file as "
        "UTF-8, e.g. `iconv -f GB18030 -t UTF-8` for a GBK export",
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    for lineno, line in utf8_lines(path):
        if not line.strip():
            continue
        try:
            yield f"line {lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}", None, f"not valid JSON: {exc.msg}") from None


def _json_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        data = json.loads(decode_utf8(path, path.read_bytes()))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno}", None, f"not valid JSON: {exc.msg}") from None
    if isinstance(data, Mapping) and isinstance(data.get("queries"), list):
        data = data["queries"]
    if not isinstance(data, list):
        raise InputError(path, None, None, "a JSON file must hold a list of rows (or JSONL)")
    for i, item in enumerate(data):
        yield f"item {i}", item


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[str, Any]]:
    # A whole query in one cell may be far over the csv module's 128 KiB default field limit;
    # the length bound of cleaning rejects it with a recorded reason instead.
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    # strict: a stray or unclosed quote is an error, not a cell that silently swallows the
    # following lines up to the end of the file.
    reader = csv.DictReader((line for _, line in utf8_lines(path)), delimiter=delimiter,
                            strict=True)
    start = 1
    try:
        if reader.fieldnames is None:
            return
        start = reader.line_num + 1
        for record in reader:
            if None in record:
                raise InputError(
                    path,
                    f"line {start}",
                    None,
                    f"{len(reader.fieldnames) + len(record[None])} cells but the header has "
                    f"{len(reader.fieldnames)} columns",
                )
            yield f"line {start}", record
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(
            path, f"line {start}", None, f"malformed CSV in the row starting here: {exc}"
        ) from None


def _columns_guard(path: Path, columns: Sequence[str], text_column: str) -> None:
    if text_column not in columns:
        raise InputError(
            path, None, text_column, f"column not found; the columns are {sorted(columns)}"
        )


def _parquet_rows(path: Path, text_column: str) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise InputError(path, None, None, f"not a readable Parquet file: {exc}") from None
    _columns_guard(path, pf.schema_arrow.names, text_column)
    offset = 0
    for batch in pf.iter_batches(batch_size=10_000):
        for i, record in enumerate(batch.to_pylist()):
            yield f"row {offset + i}", record
        offset += batch.num_rows


def _hf_rows(path: Path, text_column: str, split: str | None) -> Iterator[tuple[str, Any]]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise InputError(
            path, None, None, f"not a Hugging Face datasets folder (save_to_disk): {exc}"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None and len(ds) == 1:
            split = next(iter(ds))
        if split not in ds:
            raise InputError(
                path,
                None,
                None,
                f"split {split!r} not found; the splits are {sorted(ds)} (set `split`)",
            )
        ds = ds[split]
    _columns_guard(path, ds.column_names, text_column)
    for i, record in enumerate(ds):
        yield f"row {i}", record


def read_rows(
    path: str | Path, *, text_column: str = "text", split: str | None = None
) -> Iterator[tuple[str, Any]]:
    """``(location, raw row)`` pairs of a seed file, whatever its format."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "file not found")
    if path.is_dir():
        return _hf_rows(path, text_column, split)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(path)
    if suffix == ".json":
        return _json_rows(path)
    if suffix in (".csv", ".tsv"):
        return _csv_rows(path, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _parquet_rows(path, text_column)
    raise InputError(
        path,
        None,
        None,
        f"unsupported format {suffix!r}: use .jsonl, .json, .csv, .tsv, .parquet or a "
        "Hugging Face datasets folder",
    )


# --------------------------------------------------------------------------- one row


def _parse_hint_cell(value: str) -> list[str] | None:
    """CSV cells: a JSON list (``[]`` = no tool needed) or names separated by ``;`` ``,`` ``|``."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("["):
        return json.loads(value)
    for sep in (";", "|", ","):
        if sep in value:
            return [part.strip() for part in value.split(sep)]
    return [value]


def _validate_row(
    path: Path,
    where: str,
    record: Any,
    *,
    text_column: str,
    scenario_column: str | None,
    tools_column: str | None,
    id_column: str | None,
    from_text_format: bool,
) -> tuple[str | None, str, str | None, tuple[str, ...] | None]:
    if not isinstance(record, Mapping):
        raise InputError(path, where, None, f"a row must be an object, got {type(record).__name__}")
    if text_column not in record:
        raise InputError(path, where, text_column, "missing")
    text = record[text_column]
    if text is None:
        raise InputError(path, where, text_column, "is null")
    if not isinstance(text, str):
        raise InputError(path, where, text_column, f"must be a string, got {type(text).__name__}")

    row_id: str | None = None
    if id_column and record.get(id_column) not in (None, ""):
        raw_id = record[id_column]
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise InputError(
                path, where, id_column, f"must be a string or integer, got {type(raw_id).__name__}"
            )
        row_id = str(raw_id).strip()

    scenario: str | None = None
    if scenario_column and record.get(scenario_column) is not None:
        value = record[scenario_column]
        if not isinstance(value, str):
            raise InputError(
                path, where, scenario_column, f"must be a string, got {type(value).__name__}"
            )
        scenario = value.strip() or None

    hints: tuple[str, ...] | None = None
    if tools_column and record.get(tools_column) is not None:
        value = record[tools_column]
        if from_text_format and isinstance(value, str):
            try:
                value = _parse_hint_cell(value)
            except json.JSONDecodeError as exc:
                raise InputError(
                    path, where, tools_column, f"not a valid JSON list: {exc.msg}"
                ) from None
        elif hasattr(value, "tolist"):  # numpy arrays from columnar readers
            value = value.tolist()
        if value is not None:
            if not isinstance(value, (list, tuple)):
                raise InputError(
                    path,
                    where,
                    tools_column,
                    f"must be a list of tool names, got {type(value).__name__}",
                )
            for i, name in enumerate(value):
                if not isinstance(name, str) or not name.strip():
                    raise InputError(
                        path, where, f"{tools_column}[{i}]", "must be a non-empty tool name"
                    )
            hints = tuple(dict.fromkeys(name.strip() for name in value))
    return row_id, text, scenario, hints


def _content_id(text: str) -> str:
    return "q-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def load_seed_queries(
    path: str | Path,
    *,
    text_column: str = "text",
    scenario_column: str | None = "scenario",
    tools_column: str | None = "tools",
    id_column: str | None = "id",
    split: str | None = None,
) -> list[SeedQuery]:
    """Read and validate seed queries.

    Rows without an id get one from their text (``q-`` + 12 hex of its SHA-1, with ``-2``,
    ``-3`` ... for repeats), so ids do not depend on row order. Explicit ids must be unique.
    """
    path = Path(path)
    text_format = path.is_file() and path.suffix.lower() in (".csv", ".tsv")
    queries: list[SeedQuery] = []
    seen: dict[str, str] = {}
    for where, record in read_rows(path, text_column=text_column, split=split):
        row_id, text, scenario, hints = _validate_row(
            path,
            where,
            record,
            text_column=text_column,
            scenario_column=scenario_column,
            tools_column=tools_column,
            id_column=id_column,
            from_text_format=text_format,
        )
        if row_id is not None:
            if row_id in seen:
                raise InputError(
                    path, where, id_column, f"duplicate id {row_id!r} (first at {seen[row_id]})"
                )
        else:
            base = row_id = _content_id(text)
            n = 1
            while row_id in seen:
                n += 1
                row_id = f"{base}-{n}"
        seen[row_id] = where
        queries.append(SeedQuery(row_id, text, scenario, hints, str(path), where))
    if not queries:
        raise InputError(path, None, None, "no rows")
    return queries


def check_tool_hints(
    queries: Iterable[SeedQuery], tool_names: Iterable[str], *, tools_column: str = "tools"
) -> None:
    """Every hinted tool must be in the catalog; the error suggests the closest name."""
    known = set(tool_names)
    for q in queries:
        for i, name in enumerate(q.tool_hints or ()):
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise InputError(
                    q.source,
                    q.row,
                    f"{tools_column}[{i}]",
                    f"tool {name!r} is not in the tool catalog{hint}",
                )
