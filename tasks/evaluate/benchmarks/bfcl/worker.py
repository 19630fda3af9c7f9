"""Runs ``bfcl_worker.py`` in bfcl-eval's own virtual environment: one-shot commands
(:func:`run_worker`) and the long-lived multi-turn session (:class:`WorkerSession`).

Every run gets its own ``BFCL_PROJECT_ROOT`` (bfcl-eval would otherwise write into its
site-packages) and a dummy ``OPENAI_API_KEY`` (its OpenAI handler refuses to start without one; no
request is ever sent).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from agentune.paths import PROJECT_ROOT

WORKER = Path(__file__).with_name("bfcl_worker.py")
BFCL_VERSION = "2026.3.23"
DEFAULT_VENV = ".venv-bfcl"
_STDERR_TAIL = 3000


class BfclUnavailable(RuntimeError):
    """bfcl-eval cannot be run here; the message says why and what to do."""


def bfcl_python(setting: str | None = None) -> Path:
    """The bfcl-eval venv's Python: the setting, else ``$AGENTUNE_BFCL_PYTHON``, else
    ``.venv-bfcl/bin/python`` in the project root."""
    chosen = setting or os.environ.get("AGENTUNE_BFCL_PYTHON")
    path = Path(chosen).expanduser() if chosen else PROJECT_ROOT / DEFAULT_VENV / "bin" / "python"
    if not path.is_file():
        raise BfclUnavailable(
            f"bfcl-eval's virtual environment is missing ({path}): run `make setup` (it builds "
            f"{DEFAULT_VENV} with bfcl-eval=={BFCL_VERSION}), or set evaluate.bfcl.python")
    return path


def worker_env(project_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BFCL_"))}
    return {**env, "BFCL_PROJECT_ROOT": str(project_root), "OPENAI_API_KEY": "unused-by-bfcl",
            "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}


def run_worker(python: Path, project_root: Path, args: list[str], *, stdin: Any = None,
               timeout_s: float = 900) -> str:
    """One worker command; its stdout. Raises ``BfclUnavailable`` with the tail of its stderr."""
    project_root.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [str(python), str(WORKER), *args], input=None if stdin is None else json.dumps(stdin),
            capture_output=True, text=True, env=worker_env(project_root), timeout=timeout_s,
            cwd=project_root)
    except subprocess.TimeoutExpired:
        raise BfclUnavailable(f"bfcl worker {args[0]!r} ran past {timeout_s:g} s") from None
    if done.returncode != 0:
        raise BfclUnavailable(f"bfcl worker {args[0]!r} failed (exit {done.returncode}): "
                              f"{done.stderr[-_STDERR_TAIL:]}")
    return done.stdout


class WorkerSession:
    """``bfcl_worker.py serve``: executes multi-turn calls in BFCL's environments, one request
    at a time (its environment instances live in that process)."""

    def __init__(self, python: Path, project_root: Path) -> None:
        self._python, self._root = python, project_root
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> WorkerSession:
        self._root.mkdir(parents=True, exist_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            str(self._python), str(WORKER), "serve", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env=worker_env(self._root), cwd=self._root, limit=64 * 1024 * 1024)
        ready = await self._read()
        if not ready.get("ready"):
            raise BfclUnavailable(f"bfcl worker did not start: {ready}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def step(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdin is not None
        async with self._lock:
            self._proc.stdin.write((json.dumps(request, ensure_ascii=False) + "\n").encode())
            await self._proc.stdin.drain()
            return await self._read()

    async def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = await self._proc.stdout.readline()
        if not line:
            code = await self._proc.wait()
            raise BfclUnavailable(f"bfcl worker ended unexpectedly (exit {code})")
        return json.loads(line)
