"""What a run shows in the Prefect UI: artifacts for published versions and run summaries.

Every function here is a no-op outside a Prefect flow or task run, so plain-function callers
(tests, the CLI's store commands) can use the same code paths. They are called from sync code
inside async flows too, hence ``_sync=True``: Prefect would otherwise hand back an un-awaited
coroutine there and silently create nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import FlowRunContext, TaskRunContext

if TYPE_CHECKING:
    from agentune.tasks.store.artifact_store import Manifest


def in_prefect_run() -> bool:
    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def announce_version(manifest: "Manifest", path: Path) -> None:
    """A markdown artifact for a newly published version: where it is, how to read it, lineage."""
    if not in_prefect_run():
        return
    parents = ", ".join(f"`{p['name']}@{p['version']}`" for p in manifest.parents) or "none"
    rows = "-" if manifest.rows is None else f"{manifest.rows:,}"
    scalar = {k: v for k, v in manifest.stats.items() if not isinstance(v, (Mapping, list, tuple))}
    stats = "\n".join(f"| {k} | {_escape(v)} |" for k, v in scalar.items())
    lines = [
        f"### `{manifest.name}@{manifest.version}`",
        f"- path: `{path}`",
        f"- rows: {rows}; files: {len(manifest.files)}",
        f"- parents: {parents}",
        f"- code: `{manifest.code_version}`, commit `{manifest.git_commit}`",
        f"- read it: `pd.read_parquet(\"{path}\")`",
    ]
    if stats:
        lines += ["", "| stat | value |", "|---|---|", stats]
    for key, value in manifest.stats.items():
        if key not in scalar:  # lists and dicts: a bullet list each, never a Python repr
            lines += ["", f"**{key}**", *(bullets(value) or ["- (none)"])]
    create_markdown_artifact(
        key=artifact_key(f"{manifest.name}-version"),
        markdown="\n".join(lines),
        description=f"{manifest.name} version {manifest.version}",
        _sync=True,
    )


def _escape(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def bullets(value: Any, depth: int = 0) -> list[str]:
    """A list or dict as markdown bullet lines (nested ones indented), scalars as they are."""
    pad = "  " * depth
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    lines = []
    for key, item in items:
        label = f"{key}: " if isinstance(value, Mapping) else ""
        flat = isinstance(item, Mapping) and not any(
            isinstance(v, (Mapping, list, tuple)) for v in item.values())
        if isinstance(item, (Mapping, list, tuple)) and item and not flat:
            lines += [f"{pad}- {label}".rstrip(), *bullets(item, depth + 1)]
        else:
            lines.append(f"{pad}- {label}{cell(item)}")
    return lines


def cell(value: Any) -> Any:
    """A table cell: a list or dict as one readable line ("a, b"; "key: value; ..."), never a
    Python repr; other values as they are."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(cell(v)) for v in value) or "-"
    return value


def table(key: str, rows: Sequence[Mapping[str, Any]], description: str) -> None:
    """A table artifact (e.g. a run summary, kept/dropped counts); lists and dicts in a cell are
    written as one readable line."""
    if in_prefect_run() and rows:
        create_table_artifact(
            key=artifact_key(key), table=[{k: cell(v) for k, v in r.items()} for r in rows],
            description=description,
            _sync=True,
        )


def markdown(key: str, text: str, description: str) -> None:
    if in_prefect_run():
        create_markdown_artifact(
            key=artifact_key(key), markdown=text, description=description, _sync=True
        )
