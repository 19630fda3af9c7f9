"""One training run per work dir at a time.

A run holds ``<work dir>/run.lock`` from before it launches until its model is published: an
exclusive ``flock`` on the open file (the kernel drops it when the holder dies, however it dies)
and, inside the file, who holds it (PID, host, start time, command). A second run of the same
inputs (a schedule firing during a manual run, a second click on Run) is refused with
:class:`TrainingRunLocked`, naming the holder. A lock file whose ``flock`` is free was left by a
run that died: it is stale, taken over, and the takeover logged with what it said.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LOCK_FILE = "run.lock"
log = logging.getLogger("agentune.train")


class TrainingRunLocked(RuntimeError):
    """Another run holds the work dir; the message names it."""


def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started_at")
    when = (datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if isinstance(started, (int, float)) else "an unknown time")
    return (f"PID {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"
            f" ({holder.get('command') or 'unknown command'})")


def _read(handle: Any) -> dict[str, Any]:
    handle.seek(0)
    try:
        found = json.loads(handle.read() or "{}")
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


@contextlib.contextmanager
def work_dir_lock(work_dir: Path, *, what: str = "training run") -> Iterator[dict[str, Any]]:
    """Hold ``work_dir``'s lock for the block; raise TrainingRunLocked when another process holds
    it. Yields what the lock file now says (and ``stale``: the dead holder it replaced, if any)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / LOCK_FILE
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(handle)
            raise TrainingRunLocked(
                f"{work_dir}: another {what} of the same dataset and settings is in progress "
                f"({_describe(holder)}); wait for it to finish, or stop that process (its lock, "
                f"{path}, is released when it exits)") from None
        previous = _read(handle)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(),
              "command": " ".join(sys.argv)[:500]}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(me))
        handle.flush()
        os.fsync(handle.fileno())
        if previous:
            log.warning("%s: stale lock of a run that died taken over (%s)", work_dir,
                        _describe(previous))
        try:
            yield {**me, "stale": previous or None}
        finally:
            # Emptied, not removed: a process that opened the file meanwhile holds this inode,
            # and a new file at the same path would let it and a third run both hold "the" lock.
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()
