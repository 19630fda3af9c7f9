"""Per-trajectory checkpoints: a killed synthesis, started again, redoes no finished trajectory.

One append-only JSON Lines file per would-be ``trajectories`` version. A finished combination
(accepted or rejected) is one line, written with a single ``write`` and flushed to disk with
``fsync`` before the run moves on, so a line is either there whole or (a kill mid-write) a torn
last line without its newline, which :meth:`SynthesisCheckpoint.load` cuts off. Together with
the gateway's response cache, which holds every teacher answer of the trajectories that were in
progress, a restart pays for no answer twice.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic_core

FILE = "checkpoint.jsonl"


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class CheckpointRecord:
    """One finished combination."""

    id: str
    accepted: bool
    row: dict[str, Any] | None
    """Its ``trajectories`` row when accepted."""
    rejects: list[dict[str, str]] = field(default_factory=list)
    """Reject rows: the trajectory's own when rejected, and every failed step attempt."""
    stats: dict[str, Any] = field(default_factory=dict)

    def to_line(self) -> bytes:
        """The record as one JSON line (UTF-8, compact, ending in a newline). pydantic-core
        writes the same bytes as ``json.dumps(ensure_ascii=False, separators=(",", ":"))``
        about 5x faster: the writing thread holds the GIL the event loop needs."""
        return pydantic_core.to_json({"id": self.id, "accepted": self.accepted,
                                      "row": self.row, "rejects": self.rejects,
                                      "stats": self.stats}) + b"\n"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CheckpointRecord:
        return cls(id=data["id"], accepted=bool(data["accepted"]), row=data.get("row"),
                   rejects=list(data.get("rejects") or []), stats=dict(data.get("stats") or {}))


class SynthesisCheckpoint:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / FILE
        self._writing = threading.Lock()

    def load(self) -> dict[str, CheckpointRecord]:
        """Every record written so far, by id (the first, should an id appear twice)."""
        if not self.path.is_file():
            return {}
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # A kill during the last append: drop the torn line, keep the file appendable.
            with self.path.open("r+b") as fh:
                fh.truncate(end)
                os.fsync(fh.fileno())
        records: dict[str, CheckpointRecord] = {}
        for lineno, line in enumerate(data[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = CheckpointRecord.from_mapping(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{self.path}: line {lineno}: unreadable record ({exc}); "
                                      "delete the file to start this synthesis over") from None
            records.setdefault(record.id, record)
        return records

    def append(self, record: CheckpointRecord) -> None:
        """Write one line and fsync it; safe from several threads at once (one line each)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        line = record.to_line()
        with self._writing:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"{self.path}: short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
            finally:
                os.close(fd)
