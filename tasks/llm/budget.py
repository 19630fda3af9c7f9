"""The run's budget: what it has spent, kept on disk beside the response cache, and the
reservations of the calls in flight.

A *run* is one top-level invocation (``agentune run pipeline``, a stage run alone, a deployment
run) of one config, named ``<config name>/<flow>``: it starts on the first paid call and ends when
that invocation completes. Until then a killed, failed or budget-stopped invocation that is started
again continues the same sum, so a cap holds across kills and resumes. All gateways of a run,
in one process or several, share it (one SQLite file, WAL, ``cache_dir/ledger.sqlite``).

Every paid call reserves its worst case before it is sent (the prompt's token count plus
``max_tokens``, priced at the role's rates) in the same transaction that checks the cap against
what is spent plus what calls in flight have reserved; it is settled at the real usage when the
answer arrives, or released when the call fails. So calls in flight together can never take the
run past its cap. A reservation whose process died (a kill -9 with calls in flight) is counted as
spent at its worst case when the run is next opened: the provider may well have charged for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentune.config.llm import BudgetConfig
from agentune.tasks.llm.errors import BudgetExceeded

LEDGER_FILE = "ledger.sqlite"
LOST_IN_FLIGHT = "(in flight at a kill)"
_BUSY_TIMEOUT_MS = 30_000
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        opened_at REAL NOT NULL,
        finished_at REAL
    )""",
    "CREATE INDEX IF NOT EXISTS runs_open ON runs (name, finished_at)",
    """CREATE TABLE IF NOT EXISTS spend (
        run INTEGER NOT NULL,
        stage TEXT NOT NULL,
        role TEXT NOT NULL,
        answers INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (run, stage, role)
    )""",
    """CREATE TABLE IF NOT EXISTS reservations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run INTEGER NOT NULL,
        stage TEXT NOT NULL,
        role TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pid_started TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost REAL NOT NULL,
        created_at REAL NOT NULL
    )""",
)
_ADD_SPEND = """
INSERT INTO spend (run, stage, role, answers, prompt_tokens, completion_tokens, cost)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run, stage, role) DO UPDATE SET
    answers = answers + excluded.answers,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens,
    completion_tokens = completion_tokens + excluded.completion_tokens,
    cost = cost + excluded.cost
"""


@dataclass(frozen=True)
class Reservation:
    id: int
    tokens: int
    cost: float


@dataclass(frozen=True)
class Spent:
    tokens: int
    cost: float
    reserved_tokens: int
    reserved_cost: float


def _process_started(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), to tell it from a later
    process that got the same id; empty where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(host: str, pid: int, started: str) -> bool:
    if host != socket.gethostname():
        return True  # another machine's: it may well be running
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _process_started(pid) == started


class BudgetLedger:
    """The spend of one run, shared through ``path``; see the module's docstring."""

    def __init__(self, path: str | Path, run_name: str, budget: BudgetConfig) -> None:
        self.path = Path(path)
        self.run_name = run_name
        self.budget = budget
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._pid_started = _process_started(self._pid)
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            for statement in _SCHEMA:
                self._db.execute(statement)
        self.run_id, self.opened_at, self.reclaimed = self._open()

    # ---- the run --------------------------------------------------------------------------

    def _open(self) -> tuple[int, float, int]:
        """The unfinished run of this name (continued), else a new one; the dead processes'
        reservations counted as spent."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, opened_at FROM runs WHERE name = ? AND finished_at IS NULL "
                "ORDER BY id DESC LIMIT 1", (self.run_name,)).fetchone()
            if row is None:
                cursor = db.execute("INSERT INTO runs (name, opened_at) VALUES (?, ?)",
                                    (self.run_name, time.time()))
                return int(cursor.lastrowid or 0), time.time(), 0
            run_id, opened_at = int(row[0]), float(row[1])
            reclaimed = 0
            for rid, stage, role, host, pid, started, tokens, cost in db.execute(
                    "SELECT id, stage, role, host, pid, pid_started, tokens, cost "
                    "FROM reservations WHERE run = ?", (run_id,)).fetchall():
                if _alive(host, pid, started):
                    continue
                db.execute(_ADD_SPEND, (run_id, f"{stage} {LOST_IN_FLIGHT}", role, 0, tokens, 0,
                                        cost))
                db.execute("DELETE FROM reservations WHERE id = ?", (rid,))
                reclaimed += 1
            return run_id, opened_at, reclaimed

    def finish(self) -> None:
        """The invocation completed: the next one of this name starts a new run (a new sum)."""
        with self._transaction() as db:
            db.execute("UPDATE runs SET finished_at = ? WHERE id = ? AND finished_at IS NULL",
                       (time.time(), self.run_id))

    # ---- spending -------------------------------------------------------------------------

    def spent(self) -> Spent:
        with self._lock:
            return self._spent(self._db)

    def _spent(self, db: sqlite3.Connection) -> Spent:
        tokens, cost = db.execute(
            "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), COALESCE(SUM(cost), 0) "
            "FROM spend WHERE run = ?", (self.run_id,)).fetchone()
        reserved_tokens, reserved_cost = db.execute(
            "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost), 0) FROM reservations "
            "WHERE run = ?", (self.run_id,)).fetchone()
        return Spent(int(tokens), float(cost), int(reserved_tokens), float(reserved_cost))

    def check(self, where: str) -> None:
        """Raise BudgetExceeded when the spend alone has reached a cap (before any wait)."""
        if self.budget.max_tokens is None and self.budget.max_cost is None:
            return
        self._refuse_if_over(self.spent(), 0, 0.0, where)

    def reserve(self, stage: str, role: str, tokens: int, cost: float, where: str) -> Reservation:
        """Reserve a call's worst case, or raise BudgetExceeded when spend + reservations + it
        would pass a cap (one transaction: atomic with every other process of the run)."""
        with self._transaction() as db:
            self._refuse_if_over(self._spent(db), tokens, cost, where)
            cursor = db.execute(
                "INSERT INTO reservations (run, stage, role, host, pid, pid_started, tokens, "
                "cost, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.run_id, stage, role, self._host, self._pid, self._pid_started, tokens, cost,
                 time.time()))
            return Reservation(int(cursor.lastrowid or 0), tokens, cost)

    def settle(self, reservation: Reservation | None, stage: str, role: str, prompt_tokens: int,
               completion_tokens: int, cost: float) -> None:
        """Record an answer's real usage in place of its reservation."""
        with self._transaction() as db:
            if reservation is not None:
                db.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,))
            db.execute(_ADD_SPEND, (self.run_id, stage, role, 1, prompt_tokens,
                                    completion_tokens, cost))

    def release(self, reservation: Reservation | None) -> None:
        """A call that got no answer: its reservation is dropped."""
        if reservation is None:
            return
        with self._transaction() as db:
            db.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,))

    def rows(self) -> list[dict[str, object]]:
        """The run's spend per (stage, role), every process and invocation of it included."""
        with self._lock:
            found = self._db.execute(
                "SELECT stage, role, answers, prompt_tokens, completion_tokens, cost FROM spend "
                "WHERE run = ? ORDER BY stage, role", (self.run_id,)).fetchall()
        keys = ("stage", "role", "answers", "prompt_tokens", "completion_tokens", "cost")
        return [dict(zip(keys, row, strict=True)) for row in found]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- helpers --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _refuse_if_over(self, spent: Spent, tokens: int, cost: float, where: str) -> None:
        """Before waiting (``tokens`` = ``cost`` = 0): refuse when the settled spend has reached a
        cap. Reserving: refuse when spend, reservations in flight and this call could pass one."""
        since = datetime.fromtimestamp(self.opened_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        run = f"run {self.run_name!r} (since {since}, ledger {self.path})"
        reserving = bool(tokens or cost)
        too_big = " (more than the whole cap: lower the request's max_tokens)"
        # (budget, cap field, settled, reserved in flight, this call, number format, unit, verb)
        checks = (("token", "max_tokens", spent.tokens, spent.reserved_tokens, tokens, "d",
                   " tokens", "use"),
                  ("cost", "max_cost", spent.cost, spent.reserved_cost, cost, ".4f", "", "cost"))
        for kind, cap_field, settled, reserved, ask, fmt, unit, verb in checks:
            cap = getattr(self.budget, cap_field)
            if cap is None:
                continue
            if settled + reserved + ask > cap if reserving else settled >= cap:
                raise BudgetExceeded(
                    f"{kind} budget exhausted {where}: {settled:{fmt}}{unit} spent by {run}, "
                    f"{reserved:{fmt}} reserved by calls in flight, this call may {verb} up to "
                    f"{ask:{fmt}}{too_big if ask > cap else ''}; "
                    f"cap llm.budget.{cap_field} = {cap}"
                )
