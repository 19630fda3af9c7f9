"""The local Python interpreter tool: each program runs in its own short-lived child process.

What confines a program:

- **CPU time** ``RLIMIT_CPU`` (SIGXCPU at the limit), **memory** ``RLIMIT_AS`` (allocations fail
  with ``MemoryError``), **file size** ``RLIMIT_FSIZE`` (stdout and stderr are files too, so
  runaway printing is bounded), no core dumps; set by the child itself before the program runs
  (``tasks/tools/sandbox_child.py``).
- **Wall clock**: the parent kills the child's whole process group when it runs out.
- **Network**: ``namespace`` runs the child under ``unshare --net`` (as root) or
  ``unshare --map-root-user --net`` (as another user), a fresh network namespace whose only
  interface, loopback, is down: no address, local or remote, is reachable, for the program and
  anything it starts. Where namespaces are not permitted, ``audit_hook`` makes the interpreter
  refuse socket creation, name lookups and starting processes; that is weaker (native code, e.g.
  through ctypes, can get around it). ``PythonSandbox.isolation`` says which one is in force.
- **Files**: a fresh temporary working directory, deleted afterwards; ``python -I`` (no
  environment variables, user site or current directory on the path); an environment with no
  secrets in it.
- **User**: when agentune runs as root, the child runs as ``nobody`` (via util-linux ``setpriv``)
  and can write only its working directory (and what the world may write, such as /tmp). It keeps
  one capability, ``CAP_DAC_READ_SEARCH`` (read any file), because the interpreter and its
  libraries may live where only root can read (pyenv under /root); without network it has no way
  to send what it reads anywhere but its own output. ``PythonSandbox.user`` says who runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from agentune.config.tools import SandboxConfig
from agentune.tasks.tools.observation import ErrorKind, ToolContext, ToolFailure, ToolKind
from agentune.tasks.tools.sandbox_child import EXIT_MEMORY

CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
Isolation = Literal["namespace", "audit_hook"]
RunStatus = Literal["ok", "error", "timeout", "cpu_limit", "memory_limit", "output_limit"]


class SandboxUnavailable(RuntimeError):
    """The configured isolation cannot be had on this system."""


@dataclass(frozen=True)
class SandboxRun:
    status: RunStatus
    exit_code: int | None  # negative: killed by that signal; None: killed at the wall clock
    stdout: str
    stderr: str
    value: str | None  # repr of the last expression, when it was one and not None
    elapsed_s: float
    output_truncated: bool


def _namespace_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    if os.geteuid() == 0:
        return [unshare, "--net"]
    return [unshare, "--map-root-user", "--net"]


def _nobody_prefix() -> list[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        return []
    return [
        setpriv,
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--inh-caps=-all,+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ]


def _works(argv: list[str]) -> bool:
    try:
        probe = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


class PythonSandbox:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.python = config.python or sys.executable

    @cached_property
    def isolation(self) -> Isolation:
        """The network isolation in force (probed once; raises SandboxUnavailable when the
        config demands namespaces and the system refuses them)."""
        wanted = self.config.network_isolation
        if wanted == "audit_hook":
            return "audit_hook"
        prefix = _namespace_prefix()
        if prefix and _works([*prefix, "true"]):
            return "namespace"
        if wanted == "namespace":
            raise SandboxUnavailable(
                "tools.sandbox.network_isolation is 'namespace' but `unshare --net` is not "
                "permitted here (no unshare, or user namespaces disabled); use 'audit_hook' or "
                "'auto'"
            )
        return "audit_hook"

    @cached_property
    def _user_prefix(self) -> list[str]:
        prefix = _nobody_prefix()
        if prefix and _works([*prefix, self.python, "-I", "-c", "import json"]):
            return prefix
        return []

    @property
    def user(self) -> str:
        """Who the programs run as: ``nobody`` when agentune is root, else agentune's own user."""
        return "nobody" if self._user_prefix else f"uid {os.geteuid()}"

    def launcher(self) -> list[str]:
        """The command prefix that puts the interpreter in its namespace and user."""
        network = _namespace_prefix() if self.isolation == "namespace" else []
        return [*network, *self._user_prefix]

    async def run(self, code: str, *, wall_time_s: float | None = None) -> SandboxRun:
        """Run ``code`` to completion or to a limit; never raises for anything the code does."""
        wall = min(wall_time_s or self.config.wall_time_s, self.config.wall_time_s)
        launcher = self.launcher()
        as_nobody = bool(self._user_prefix)
        with tempfile.TemporaryDirectory(prefix="agentune-sandbox-") as tmp:
            control = Path(tmp)
            work = control / "work"
            work.mkdir()
            program = control / "main.py"
            program.write_text(code, encoding="utf-8")
            if as_nobody:
                os.chown(work, NOBODY, NOBODY)
            settings: dict[str, Any] = {
                "program": str(program),
                "cpu_s": max(1, min(self.config.cpu_time_s, math.ceil(wall))),
                "memory_bytes": self.config.memory_mb * 2**20,
                "file_bytes": self.config.max_file_mb * 2**20,
                "audit_hook": self.isolation == "audit_hook",
                "max_value_chars": self.config.max_output_chars,
            }
            with (
                open(control / "stdout", "w+b") as out,
                open(control / "stderr", "w+b") as err,
                open(control / "value", "w+b") as value,
            ):
                settings["value_fd"] = value.fileno()
                started = time.monotonic()
                code_or_none = await self._execute(
                    [*launcher, self.python, "-I", str(CHILD), json.dumps(settings)],
                    work,
                    out,
                    err,
                    value.fileno(),
                    wall,
                )
                elapsed = time.monotonic() - started
                # Python ignores SIGXFSZ: a write past the file-size limit fails with EFBIG instead,
                # so a full stdout or stderr file is the sign.
                filled = (
                    max(os.fstat(f.fileno()).st_size for f in (out, err)) >= settings["file_bytes"]
                )
                stdout, cut_out = self._read(out)
                stderr, cut_err = self._read(err)
                value_text, _ = self._read(value)
        status = _status(code_or_none)
        if filled and status != "ok":
            status = "output_limit"
        return SandboxRun(
            status=status,
            exit_code=code_or_none,
            stdout=stdout,
            stderr=stderr,
            value=value_text or None,
            elapsed_s=elapsed,
            output_truncated=cut_out or cut_err,
        )

    async def _execute(
        self, argv: list[str], work: Path, out: Any, err: Any, value_fd: int, wall: float
    ) -> int | None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=work,
            env=self._environment(work),
            start_new_session=True,  # its own process group, so everything it starts dies with it
            pass_fds=(value_fd,),
        )
        try:
            return await asyncio.wait_for(proc.wait(), wall)
        except TimeoutError:
            return None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.returncode is None:
                await proc.wait()

    def _environment(self, work: Path) -> dict[str, str]:
        """A clean environment: nothing of the parent's (API keys live there) but PATH."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(work),
            "TMPDIR": str(work),
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }

    def _read(self, handle: Any) -> tuple[str, bool]:
        limit = self.config.max_output_chars
        handle.seek(0)
        raw = handle.read(limit * 4 + 4)  # a UTF-8 character is at most 4 bytes
        more = bool(handle.read(1))
        text = raw.decode("utf-8", "replace")
        if len(text) > limit or more:
            return text[:limit], True
        return text, False


def _status(exit_code: int | None) -> RunStatus:
    if exit_code is None:
        return "timeout"
    if exit_code == 0:
        return "ok"
    if exit_code in (-signal.SIGXCPU, -signal.SIGKILL):
        # SIGKILL without our wall-clock kill is the kernel's hard RLIMIT_CPU stop.
        return "cpu_limit"
    if exit_code == EXIT_MEMORY:
        return "memory_limit"
    return "error"


class PythonInterpreter:
    """Backend of a catalog tool with ``code`` and optional ``timeout_seconds`` arguments."""

    kind: ToolKind = "real"
    required: tuple[str, ...] = ("code",)

    def __init__(self, sandbox: PythonSandbox) -> None:
        self.sandbox = sandbox

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        asked = arguments.get("timeout_seconds")
        wall = min(float(asked), self.sandbox.config.wall_time_s) if asked else None
        run = await self.sandbox.run(str(arguments["code"]), wall_time_s=wall)
        output: dict[str, Any] = {"stdout": run.stdout}
        if run.stderr:
            output["stderr"] = run.stderr
        if run.output_truncated:
            output["note"] = (
                f"output cut to {self.sandbox.config.max_output_chars} characters per stream"
            )
        if run.status == "ok":
            if run.value is not None:
                output["result"] = run.value
            return output
        limits = self.sandbox.config
        failures: dict[RunStatus, tuple[ErrorKind, str]] = {
            "error": ("execution", _last_line(run.stderr) or f"exit status {run.exit_code}"),
            "timeout": (
                "timeout",
                f"the program did not finish within {wall or limits.wall_time_s:g} s",
            ),
            "cpu_limit": (
                "resource_limit",
                f"the program used more than {limits.cpu_time_s} s of CPU time",
            ),
            "memory_limit": (
                "resource_limit",
                f"the program needed more than {limits.memory_mb} MiB of memory",
            ),
            "output_limit": (
                "resource_limit",
                f"the program wrote more than {limits.max_file_mb} MiB to a file or its output",
            ),
        }
        kind, message = failures[run.status]
        raise ToolFailure(kind, message, details=output)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
