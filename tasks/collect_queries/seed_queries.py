"""Seed queries from JSONL, JSON, CSV/TSV, Parquet or a Hugging Face ``datasets`` folder.

Every row is checked on its own; a row that cannot be used raises :class:`InputError` naming the
file, the row and the field, before anything is written (the readers: ``common/input_files``).

Content problems that cleaning can judge (an empty text, a text too long) are not errors here:
they become rejects later, so one bad row of a large file does not stop a run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentune.tasks.common.input_files import InputError, read_rows


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
    for where, record in read_rows(path, text_column=text_column, split=split,
                                   list_key="queries"):
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
