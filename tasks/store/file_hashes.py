"""sha256 of files, with large ones remembered by their identity on disk.

Input files are hashed into version ids (a changed input gives a new version) and published files
are checked on every read. For a 72B base model that is ~145 GB read on every pipeline run, even
when the train stage only finds its published version. So the digest of a file of at least
``MEMO_MIN_BYTES`` is remembered in a small SQLite table, keyed by its real path and its (size,
mtime, ctime, inode): any write to a file changes its ctime, which no tool can set back, so a
remembered digest is only reused for a file untouched since it was hashed. ``rehash=True`` (what
``agentune verify`` does) reads every byte again, for damage that leaves the metadata alone (a
failing disk).

The table lives in ``$AGENTUNE_HASH_MEMO``, default ``$XDG_CACHE_HOME/agentune/file-sha256.sqlite``
(``~/.cache/...``); deleting it only costs the next run a full read.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MEMO_MIN_BYTES = 64 << 20

_SCHEMA = """CREATE TABLE IF NOT EXISTS digests (
    path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, inode INTEGER,
    sha256 TEXT NOT NULL)"""


def memo_path() -> Path:
    explicit = os.environ.get("AGENTUNE_HASH_MEMO")
    if explicit:
        return Path(explicit)
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "agentune" / "file-sha256.sqlite"


def sha256_file(path: Path, *, rehash: bool = False) -> str:
    """The file's sha256 (hex); for a large file, the remembered one while the file is unchanged,
    unless ``rehash``. A memo that cannot be used (a read-only home, a network file system where
    SQLite cannot lock) only costs the full read."""
    stat = path.stat()
    if stat.st_size < MEMO_MIN_BYTES:
        return read_digest(path)
    identity, key = _identity(stat), str(path.resolve())
    if not rehash:
        remembered = _memo_call(lambda db: db.execute(
            "SELECT size, mtime_ns, ctime_ns, inode, sha256 FROM digests WHERE path = ?",
            (key,)).fetchone())
        if remembered is not None and tuple(remembered[:4]) == identity:
            return str(remembered[4])
    digest = read_digest(path)
    if _identity(path.stat()) == identity:  # not written to while it was read
        _memo_call(lambda db: db.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?)",
                                         (key, *identity, digest)))
    return digest


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def read_digest(path: Path) -> str:
    """Every byte read: no memo."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _memo_call(use: Callable[[sqlite3.Connection], Any]) -> Any:
    """``use(db)`` on the memo, or None (logged) when the memo cannot be used."""
    path = memo_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit, WAL, a busy timeout: several processes (DeepSpeed ranks, parallel runs)
        # share it.
        with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(_SCHEMA)
            return use(db)
    except (sqlite3.Error, OSError) as exc:
        log.warning("file hash memo %s unusable (%s); large files are read in full", path, exc)
        return None
