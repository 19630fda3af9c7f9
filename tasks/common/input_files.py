"""Reading input files row by row: JSONL, JSON, CSV/TSV, Parquet or a Hugging Face datasets folder.

Every reader yields ``(location, raw row)`` pairs and leaves checking each row to its caller. A
row is located the way a person looks it up: ``line N`` in text formats (JSONL, CSV; the CSV
header is line 1), ``row N`` (0-based, as ``df.iloc[N]`` / ``dataset[N]``) in Parquet and
datasets folders, ``item N`` in a JSON array. A file that cannot be read raises
:class:`InputError` naming the file, the row and the field, before anything is written.

Text files must be UTF-8 (a BOM is allowed): other bytes are an error naming the line and the byte
offset, never silently replaced (see :func:`utf8_lines`). CSV is read strictly, so a stray quote is
an error at the row it opens instead of a cell that swallows the rest of the file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
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


def _json_rows(path: Path, list_key: str | None) -> Iterator[tuple[str, Any]]:
    try:
        data = json.loads(decode_utf8(path, path.read_bytes()))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno}", None, f"not valid JSON: {exc.msg}") from None
    if list_key and isinstance(data, Mapping) and isinstance(data.get(list_key), list):
        data = data[list_key]
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


def _columns_guard(path: Path, columns: Sequence[str], text_column: str | None) -> None:
    if text_column is not None and text_column not in columns:
        raise InputError(
            path, None, text_column, f"column not found; the columns are {sorted(columns)}"
        )


def _parquet_rows(path: Path, text_column: str | None) -> Iterator[tuple[str, Any]]:
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


def _hf_rows(path: Path, text_column: str | None, split: str | None,
             split_setting: str) -> Iterator[tuple[str, Any]]:
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
                f"split {split!r} not found; the splits are {sorted(ds)} (set `{split_setting}`)",
            )
        ds = ds[split]
    _columns_guard(path, ds.column_names, text_column)
    for i, record in enumerate(ds):
        yield f"row {i}", record


def read_rows(
    path: str | Path, *, text_column: str | None = "text", split: str | None = None,
    split_setting: str = "split", list_key: str | None = None, csv_allowed: bool = True,
) -> Iterator[tuple[str, Any]]:
    """``(location, raw row)`` pairs of an input file, whatever its format.

    ``text_column``: a column columnar formats must have (checked once, before any row).
    ``split``: which split of a datasets folder with several (``split_setting`` names the config
    field in the error). ``list_key``: a JSON file may hold ``{list_key: [rows]}``.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "file not found")
    if path.is_dir():
        return _hf_rows(path, text_column, split, split_setting)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(path)
    if suffix == ".json":
        return _json_rows(path, list_key)
    if csv_allowed and suffix in (".csv", ".tsv"):
        return _csv_rows(path, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _parquet_rows(path, text_column)
    formats = ".jsonl, .json, .csv, .tsv, .parquet" if csv_allowed else ".jsonl, .json, .parquet"
    raise InputError(path, None, None,
                     f"unsupported format {suffix!r}: use {formats} or a Hugging Face datasets "
                     "folder")
