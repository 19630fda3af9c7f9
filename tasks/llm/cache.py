"""The persistent response cache: a killed run started again pays for no answer twice.

One SQLite file in WAL mode, shared safely by several processes (readers never block, writers
wait up to the busy timeout) and by the threads the gateway hands its lookups to. Only successful
results are stored; the key is ``ChatRequest.cache_key(provider, model)``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from .types import ChatResult

log = logging.getLogger("agentune.llm")

_BUSY_TIMEOUT_MS = 30_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


class ResponseCache:
    """Maps a request's cache key to the ``ChatResult`` it got. Methods block (briefly): call them
    from a worker thread (``asyncio.to_thread``) inside an event loop."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: every statement is its own short transaction, so no lock is held between
        # calls and other processes only wait for single statements.
        self._db = sqlite3.connect(
            self.path,
            timeout=_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(_SCHEMA)

    def get(self, key: str) -> ChatResult | None:
        """The stored result (with ``cached=True``), or ``None``."""
        with self._lock:
            row = self._db.execute("SELECT result FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            result = ChatResult.model_validate_json(row[0])
        except ValidationError:
            # A row written by an incompatible version: answer again and overwrite it.
            log.warning("response cache %s: unreadable entry %s ignored", self.path, key)
            return None
        return result.model_copy(update={"cached": True})

    def put(self, key: str, result: ChatResult, role: str) -> None:
        blob = result.model_dump_json(exclude={"cached"})
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, role, result, created_at) "
                "VALUES (?, ?, ?, ?)",
                (key, role, blob, time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
