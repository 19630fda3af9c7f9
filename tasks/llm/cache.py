"""The persistent response cache: a killed run started again pays for no answer twice.

One SQLite file in WAL mode, shared safely by several processes (readers never block, writers
wait up to the busy timeout). Only successful results are stored; the key is
``ChatRequest.cache_key(provider, model)``.

Key formats: a file made by this version records ``key_format`` 2 in its ``meta`` table. A file
that already held answers without that mark was written under the first format
(``ChatRequest.legacy_cache_key``); on a miss there the old key is looked up too, and a hit is
copied under the new key (queued to the writer, not waited for), so an answer paid for before
the change is neither orphaned nor paid for again.

Inside an event loop, read with ``get`` directly (a WAL read on its own connection takes
microseconds and never waits for a writer) and write with ``await aput``: writes go to one
writer thread that commits whatever has queued up in one transaction and then wakes the
waiting callers, so a caller's answer is committed when ``aput`` returns, and dozens of calls
in flight cost a thread hand-off per batch instead of one per call.

Durable before used: the gateway hands an answer to its caller only after ``aput`` returned, so
whatever a caller has seen is in the file. "Committed" means in the WAL through ``write()``:
it survives the process being killed at any point (tests/drills/test_durable_cache.py kills
it as answers arrive). ``synchronous = NORMAL`` does not fsync each commit, so an operating
system crash or power loss can lose the commits since the last WAL checkpoint; such a run
asks those requests again. ``stats()`` reports what the wait for the commit costs a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agentune.tasks.llm.types import CacheKey, ChatResult

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
_INSERT = "INSERT OR REPLACE INTO responses (key, role, result, created_at) VALUES (?, ?, ?, ?)"
_META = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
KEY_FORMAT = "2"
"""The cache key format this version writes (``ChatRequest.cache_key``)."""


@dataclass
class _Write:
    row: tuple[str, str, str, float]
    loop: asyncio.AbstractEventLoop | None = None
    done: asyncio.Future[None] | None = None
    """None: nobody waits for it (a legacy entry copied under its new key)."""


class ResponseCache:
    """Maps a request's cache key to the ``ChatResult`` it got. ``get`` and ``put`` are
    synchronous (``put`` may wait for another process's write); ``aput`` is the event-loop
    form of ``put``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(_SCHEMA)
            self._db.execute(_META)
            self.legacy_keys = self._older_entries()
        # Reads have their own connection, so a read never queues behind a write in progress.
        self._reader = self._connect()
        self._reader_lock = threading.Lock()
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._closed = False
        # What durability costs: each aput's wait for its commit (the latest 65,536), rows and
        # transactions written.
        self._waits: deque[float] = deque(maxlen=65_536)
        self._commits = 0
        self._rows = 0

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: every statement is its own short transaction, so no lock is held between
        # calls and other processes only wait for single statements.
        return sqlite3.connect(
            self.path,
            timeout=_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )

    def _older_entries(self) -> bool:
        """Whether the file may hold entries under the first key format: it held answers before
        any version marked its key format. An empty file is marked as this format's."""
        marked = self._db.execute("SELECT value FROM meta WHERE name = 'key_format'").fetchone()
        if marked is not None:
            return False
        if self._db.execute("SELECT 1 FROM responses LIMIT 1").fetchone() is not None:
            return True
        self._db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('key_format', ?)",
                         (KEY_FORMAT,))
        return False

    def _read(self, key: str) -> tuple[str, str, float] | None:
        with self._reader_lock:
            return self._reader.execute(
                "SELECT result, role, created_at FROM responses WHERE key = ?", (str(key),)
            ).fetchone()

    def get(self, key: str) -> ChatResult | None:
        """The stored result (with ``cached=True``), or ``None``. In a file with entries of the
        first key format, a ``CacheKey``'s legacy key is looked up on a miss (see the module
        doc)."""
        row = self._read(key)
        if row is None and self.legacy_keys and isinstance(key, CacheKey):
            row = self._read(key.legacy())
            if row is not None:
                self._enqueue(_Write((str(key), row[1], row[0], row[2])))
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
        with self._lock:
            self._db.execute(_INSERT, _row(key, result, role))

    async def aput(self, key: str, result: ChatResult, role: str) -> None:
        """``put`` without blocking the event loop; returns once the row is committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._enqueue(_Write(_row(key, result, role), loop, done))
        start = time.perf_counter()
        await done
        self._waits.append(time.perf_counter() - start)

    def _enqueue(self, write: _Write) -> None:
        with self._writer_lock:  # callers on several event loops (threads) share one writer
            if self._closed:
                raise RuntimeError(f"response cache {self.path} is closed")
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_batches, name="response-cache-writer", daemon=True
                )
                self._writer.start()
            self._writes.put(write)

    def stats(self) -> dict[str, float]:
        """Writes through ``aput``: how many, in how many transactions, and the wait for the
        commit each caller saw (mean, median, p99, max; seconds)."""
        waits = sorted(self._waits)
        if not waits:
            return {"writes": 0, "commits": self._commits}
        return {"writes": self._rows, "commits": self._commits,
                "wait_s_mean": sum(waits) / len(waits), "wait_s_p50": waits[len(waits) // 2],
                "wait_s_p99": waits[min(len(waits) - 1, int(0.99 * len(waits)))],
                "wait_s_max": waits[-1]}

    def _write_batches(self) -> None:
        """The writer thread: commit everything queued so far in one transaction, then settle
        each waiting caller's future (one wake-up per event loop and batch)."""
        while (first := self._writes.get()) is not None:
            batch, stop = [first], False
            while True:
                try:
                    item = self._writes.get_nowait()
                except queue.Empty:
                    break
                if item is None:  # close(): this batch is the last
                    stop = True
                    break
                batch.append(item)
            error: Exception | None = None
            try:
                with self._lock:
                    self._db.execute("BEGIN IMMEDIATE")
                    try:
                        self._db.executemany(_INSERT, [w.row for w in batch])
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                    self._db.execute("COMMIT")
                self._commits += 1
                self._rows += len(batch)
            except sqlite3.Error as exc:
                error = exc
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = defaultdict(list)
            for write in batch:
                if write.loop is not None and write.done is not None:
                    by_loop[write.loop].append(write.done)
            for loop, futures in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_settle, futures, error)
            if stop:
                return

    def __len__(self) -> int:
        with self._reader_lock:
            return self._reader.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Finish the queued writes, then close both connections."""
        with self._writer_lock:
            self._closed = True
            writer, self._writer = self._writer, None
            if writer is not None:
                self._writes.put(None)
        if writer is not None:
            writer.join()
        with self._lock:
            self._db.close()
        with self._reader_lock:
            self._reader.close()


def _row(key: str, result: ChatResult, role: str) -> tuple[str, str, str, float]:
    return str(key), role, result.model_dump_json(exclude={"cached"}), time.time()


def _settle(futures: list[asyncio.Future[None]], error: Exception | None) -> None:
    for future in futures:
        if future.done():  # its caller was cancelled
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
