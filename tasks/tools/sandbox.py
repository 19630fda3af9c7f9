"""The local Python interpreter tool: each program runs in its own short-lived child process.

Two modes (``tools.sandbox.mode``).

**bubblewrap** (the default). The child runs under ``bwrap`` (Debian/Ubuntu ``bubblewrap``):

- **Files**: a new mount namespace whose root is an empty tmpfs holding only ``/usr`` (and the
  ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` links or folders) and the interpreter's own
  installation folders (its prefix and base prefix), all read-only; a fresh ``/proc`` of its own
  PID namespace (no other process is visible, agentune's included) and a minimal ``/dev``; a
  private, empty ``/tmp``; and its working directory ``/sandbox``, a fresh host folder deleted
  afterwards and the only place it can write that outlives nothing. No ``/etc``, no ``/root``, no
  home folder, no project folder: a file outside those mounts does not exist for the program.
- **Network**: its own network namespace, where only its own loopback exists: nothing of this
  machine or any other is reachable (127.0.0.1 is the sandbox's own, empty one).
- **User and capabilities**: as root, bwrap runs without a user namespace and drops to an
  unprivileged user of its own (``setpriv``, no capabilities, empty bounding set, no new
  privileges), one user per concurrent run where the system allows (else ``nobody``); as another
  user, bwrap makes a user namespace and drops every capability.
- **Processes**: ``RLIMIT_NPROC`` (``max_processes``) of that user, counted per sandbox, so a fork
  bomb stops at the limit; everything dies with the sandbox's PID namespace.
- **Limits** as before, set by the child itself (``tasks/tools/sandbox_child.py``): CPU time
  ``RLIMIT_CPU`` (SIGXCPU at the limit), memory ``RLIMIT_AS`` (allocations fail with
  ``MemoryError``), file size ``RLIMIT_FSIZE`` (stdout and stderr are files too, so runaway
  printing is bounded), no core dumps; and the wall clock, enforced by the parent, which kills
  bwrap (and with it the whole PID namespace).

Where bwrap is missing or cannot run (no user namespaces for a non-root user, a container that
forbids mount namespaces) the Python tool is refused (:class:`SandboxUnavailable`, raised when
the tool is set up) with what to install, unless ``tools.sandbox: unsafe_local`` is set.

**unsafe_local**: the pre-bubblewrap confinement, for machines where bwrap cannot run and the
code is trusted. The same OS limits; the network cut by ``unshare --net`` where permitted, else
by an audit hook inside the interpreter (which native code can get around); as root, the child
runs as ``nobody`` but keeps ``CAP_DAC_READ_SEARCH`` (its interpreter may live under /root), so it
can read every file on the machine, and as another user it can read whatever that user can.

In both modes: ``python -I`` (no environment variables, user site or current directory on the
path) and an environment with no secrets in it. Each failure comes back to the agent with its
reason (the program's last error line, and what the sandbox does not allow).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from agentune.config.tools import SandboxConfig
from agentune.tasks.tools.observation import ErrorKind, ToolContext, ToolFailure, ToolKind
from agentune.tasks.tools.sandbox_child import EXIT_MEMORY, PROCESS_LIMIT_MARK

CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
# Sandbox users when agentune is root: one per concurrent run, so one run's fork bomb does not
# use up another's process limit (RLIMIT_NPROC counts per user). Far above any real account;
# where the system cannot switch to them (a container mapping only 65,536 ids) ``nobody`` is used.
SANDBOX_UID_BASE = 1_900_000_000
SANDBOX_UIDS = 4096
# Paths of the program's world inside bwrap.
INSIDE_WORK = "/sandbox"
INSIDE_CONTROL = "/.sandbox"  # read-only: the program and its runner
# The top-level system folders mounted read-only (or recreated as the symlinks they are).
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
Isolation = Literal["bubblewrap", "namespace", "audit_hook"]
RunStatus = Literal[
    "ok", "error", "timeout", "cpu_limit", "memory_limit", "output_limit", "process_limit"
]

INSTALL_HINT = (
    "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`; `make setup` "
    "does it where it runs as root with apt), or set `environments.tools.sandbox: unsafe_local` to run "
    "model-written code with OS limits only (it can then read every file agentune's user can)"
)


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


def _drop_to(uid: int) -> list[str]:
    """As root inside bwrap: become ``uid`` with no capability, bounding set or new privilege."""
    return [
        "/usr/bin/setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def _works(argv: list[str]) -> bool:
    return _probe(argv) is None


def _probe(argv: list[str]) -> str | None:
    """None when ``argv`` exits 0, else what went wrong (its stderr's last line)."""
    try:
        probe = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if probe.returncode == 0:
        return None
    lines = probe.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {probe.returncode}"


def _interpreter_folders(python: str) -> list[str]:
    """The folders the interpreter needs besides /usr: its prefix and base prefix (a venv and
    the Python it was made from), and the folder of the real executable."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        out = subprocess.run(
            [python, "-I", "-c", "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix,"
             " sys.exec_prefix, sys.base_exec_prefix]))"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        prefixes = json.loads(out)
    prefixes.append(os.path.dirname(os.path.realpath(python)))
    prefixes.append(os.path.dirname(os.path.abspath(python)))
    folders: list[str] = []
    for folder in sorted({os.path.abspath(p) for p in prefixes}, key=len):
        if folder == "/" or any(folder == s or folder.startswith(s + "/") for s in _SYSTEM_PATHS):
            continue
        if any(folder.startswith(f + "/") for f in folders):
            continue
        folders.append(folder)
    return folders


class _UidPool:
    """Sandbox users handed out one per concurrent run (root only)."""

    def __init__(self) -> None:
        self._free = itertools.count()
        self._returned: list[int] = []
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            slot = self._returned.pop() if self._returned else next(self._free) % SANDBOX_UIDS
        return SANDBOX_UID_BASE + slot

    def give(self, uid: int) -> None:
        with self._lock:
            self._returned.append(uid - SANDBOX_UID_BASE)


_UIDS = _UidPool()
_PROBED: dict[tuple[str | None, str, int | None, int], str | None] = {}


class PythonSandbox:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.python = config.python or sys.executable

    # ---- what confines the programs (probed once) -------------------------------------------

    @cached_property
    def isolation(self) -> Isolation:
        """``bubblewrap``, or under ``unsafe_local`` the network isolation in force. Raises
        SandboxUnavailable when the configured confinement cannot be had here."""
        if self.config.mode == "bubblewrap":
            self._check_bubblewrap()
            return "bubblewrap"
        wanted = self.config.network_isolation
        if wanted == "audit_hook":
            return "audit_hook"
        prefix = _namespace_prefix()
        if prefix and _works([*prefix, "true"]):
            return "namespace"
        if wanted == "namespace":
            raise SandboxUnavailable(
                "environments.tools.sandbox.network_isolation is 'namespace' but `unshare --net` is not "
                "permitted here (no unshare, or user namespaces disabled); use 'audit_hook' or "
                "'auto'"
            )
        return "audit_hook"

    @cached_property
    def _bwrap(self) -> str | None:
        return shutil.which("bwrap")

    @cached_property
    def _mounts(self) -> list[str]:
        """bwrap's arguments for the read-only root, /proc, /dev, /tmp and the interpreter."""
        args: list[str] = []
        for path in _SYSTEM_PATHS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        # /tmp first: an interpreter under /tmp (a checkout there) is bound on top of it.
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        made: set[str] = {"/tmp", "/proc", "/dev"}
        for folder in _interpreter_folders(self.python):
            # bwrap would make the folders above a mount point 0700 (unreadable for the sandbox
            # user): make them first, empty and 0755.
            for parent in reversed(Path(folder).parents):
                if str(parent) != "/" and str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", folder, folder]
        return args

    def _bwrap_command(self, work: Path, control: Path, uid: int | None) -> list[str]:
        assert self._bwrap is not None
        if os.geteuid() == 0:
            # No user namespace: the drop to an unprivileged user happens inside, so that
            # RLIMIT_NPROC (which never binds uid 0, namespaced or not) counts its processes.
            namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                          "--unshare-cgroup-try"]
            drop = _drop_to(uid if uid is not None else NOBODY)
        else:
            namespaces = ["--unshare-all", "--cap-drop", "ALL"]
            drop = []
        return [
            self._bwrap, *self._mounts,
            "--bind", str(work), INSIDE_WORK,
            "--ro-bind", str(control), INSIDE_CONTROL,
            "--chdir", INSIDE_WORK,
            *namespaces,
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--",
            *drop,
        ]

    @cached_property
    def _pooled_uids(self) -> bool:
        """Whether root can switch to the pool's users here (else everything runs as nobody)."""
        return os.geteuid() == 0 and self._bwrap_probe(SANDBOX_UID_BASE) is None

    def _bwrap_probe(self, uid: int | None) -> str | None:
        """Start a sandbox running ``python -c 'import json'``; None when it works, else why not
        (remembered per process: the system does not change under a run)."""
        key = (self._bwrap, self.python, uid, os.geteuid())
        if key not in _PROBED:
            _PROBED[key] = self._probe_once(uid)
        return _PROBED[key]

    def _probe_once(self, uid: int | None) -> str | None:
        with tempfile.TemporaryDirectory(prefix="agentune-sandbox-probe-") as tmp:
            control, work = Path(tmp) / "control", Path(tmp) / "work"
            control.mkdir()
            work.mkdir()
            os.chmod(tmp, 0o755)
            os.chmod(control, 0o755)
            return _probe([*self._bwrap_command(work, control, uid), self.python, "-I", "-c",
                           "import json"])

    def _check_bubblewrap(self) -> None:
        if self._bwrap is None:
            raise SandboxUnavailable(
                "the Python tool runs model-written code under bubblewrap, and `bwrap` is not "
                f"installed: {INSTALL_HINT}"
            )
        problem = self._bwrap_probe(NOBODY if os.geteuid() == 0 else None)
        if problem is not None:
            raise SandboxUnavailable(
                f"the Python tool runs model-written code under bubblewrap, and `{self._bwrap}` "
                f"cannot start a sandbox here ({problem}; a non-root user needs unprivileged user "
                f"namespaces, a container needs to permit mount namespaces): {INSTALL_HINT}"
            )

    @cached_property
    def _user_prefix(self) -> list[str]:
        prefix = _nobody_prefix()
        if prefix and _works([*prefix, self.python, "-I", "-c", "import json"]):
            return prefix
        return []

    @property
    def user(self) -> str:
        """Who the programs run as."""
        if self.isolation == "bubblewrap":
            if os.geteuid() != 0:
                return f"uid {os.geteuid()} in a user namespace, no capabilities"
            if self._pooled_uids:
                return (f"one of uids {SANDBOX_UID_BASE}-{SANDBOX_UID_BASE + SANDBOX_UIDS - 1}, "
                        "no capabilities")
            return "nobody, no capabilities"
        return "nobody" if self._user_prefix else f"uid {os.geteuid()}"

    def launcher(self) -> list[str]:
        """unsafe_local: the command prefix that puts the interpreter in its namespace and user."""
        network = _namespace_prefix() if self.isolation == "namespace" else []
        return [*network, *self._user_prefix]

    # ---- running a program ------------------------------------------------------------------

    async def run(self, code: str, *, wall_time_s: float | None = None) -> SandboxRun:
        """Run ``code`` to completion or to a limit; never raises for anything the code does."""
        wall = min(wall_time_s or self.config.wall_time_s, self.config.wall_time_s)
        bubblewrap = self.isolation == "bubblewrap"
        uid: int | None = None
        if bubblewrap and os.geteuid() == 0:
            uid = _UIDS.take() if self._pooled_uids else NOBODY
        try:
            return await self._run(code, wall, bubblewrap, uid)
        finally:
            if uid is not None and uid != NOBODY:
                _UIDS.give(uid)

    async def _run(self, code: str, wall: float, bubblewrap: bool, uid: int | None) -> SandboxRun:
        with tempfile.TemporaryDirectory(prefix="agentune-sandbox-") as tmp:
            control = Path(tmp)
            work = control / "work"
            work.mkdir()
            program = control / "main.py"
            program.write_text(code, encoding="utf-8")
            if bubblewrap:
                # The control folder is mounted read-only as INSIDE_CONTROL: the program and a copy
                # of the runner, readable by the sandbox user; the work folder is its own.
                shutil.copyfile(CHILD, control / "child.py")
                os.chmod(control, 0o755)
                for name in ("main.py", "child.py"):
                    os.chmod(control / name, 0o644)
                if uid is not None:
                    os.chown(work, uid, uid)
                program_path, child_path = f"{INSIDE_CONTROL}/main.py", f"{INSIDE_CONTROL}/child.py"
                prefix = self._bwrap_command(work, control, uid)
                cwd = control
            else:
                program_path, child_path = str(program), str(CHILD)
                prefix = self.launcher()
                if self._user_prefix:
                    os.chown(work, NOBODY, NOBODY)
                cwd = work
            settings: dict[str, Any] = {
                "program": program_path,
                "cpu_s": max(1, min(self.config.cpu_time_s, math.ceil(wall))),
                "memory_bytes": self.config.memory_mb * 2**20,
                "file_bytes": self.config.max_file_mb * 2**20,
                "processes": self.config.max_processes if bubblewrap else None,
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
                    [*prefix, self.python, "-I", child_path, json.dumps(settings)],
                    cwd,
                    out,
                    err,
                    value.fileno(),
                    wall,
                    INSIDE_WORK if bubblewrap else str(work),
                )
                elapsed = time.monotonic() - started
                # Python ignores SIGXFSZ: a write past the file-size limit fails with EFBIG instead,
                # so a full stdout or stderr file is the sign.
                filled = (
                    max(os.fstat(f.fileno()).st_size for f in (out, err)) >= settings["file_bytes"]
                )
                limited = bubblewrap and _mentions(err, PROCESS_LIMIT_MARK)
                stdout, cut_out = self._read(out)
                stderr, cut_err = self._read(err)
                value_text, _ = self._read(value)
        if bubblewrap and code_or_none is not None and code_or_none > 128:
            code_or_none = -(code_or_none - 128)  # bwrap reports a child killed by N as 128 + N
        status = _status(code_or_none)
        if filled and status != "ok":
            status = "output_limit"
        elif limited:
            status = "process_limit"  # a process of the program's hit it and killed them all
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
        self, argv: list[str], cwd: Path, out: Any, err: Any, value_fd: int, wall: float,
        home: str,
    ) -> int | None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=self._environment(home),
            start_new_session=True,  # its own process group, so everything it starts dies with it
            pass_fds=(value_fd,),
        )
        try:
            return await asyncio.wait_for(proc.wait(), wall)
        except TimeoutError:
            return None
        finally:
            # bwrap's PID namespace dies with it (--die-with-parent on its init): nothing the
            # program started survives. Without bwrap, its process group is killed.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.returncode is None:
                await proc.wait()

    def _environment(self, home: str) -> dict[str, str]:
        """A clean environment: nothing of the parent's (API keys live there) but PATH."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "TMPDIR": "/tmp" if home == INSIDE_WORK else home,
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": home,
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


def _mentions(handle: Any, mark: str) -> bool:
    """Whether a whole output file (bounded by the file-size limit) contains ``mark``."""
    handle.seek(0)
    needle, tail = mark.encode(), b""
    while chunk := handle.read(1 << 20):
        if needle in tail + chunk:
            return True
        tail = chunk[-len(needle):]
    return False


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
        error = _last_line(run.stderr) or f"exit status {run.exit_code}"
        failures: dict[RunStatus, tuple[ErrorKind, str]] = {
            "error": ("execution", error + _confinement_hint(error, self.sandbox)),
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
            "process_limit": (
                "resource_limit",
                f"the program tried to run more than {limits.max_processes} processes at once",
            ),
        }
        kind, message = failures[run.status]
        raise ToolFailure(kind, message, details=output)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


# Errors that mean the sandbox said no, and the rule behind each, appended to the tool result so
# the agent (and whoever reads the data) sees why, not only an errno.
_NETWORK_ERRORS = ("ConnectionRefusedError", "Network is unreachable", "gaierror",
                   "Temporary failure in name resolution", "Name or service not known",
                   "not allowed in the sandbox (no network")
_FILE_ERRORS = ("FileNotFoundError", "PermissionError", "Read-only file system",
                "NotADirectoryError", "IsADirectoryError")


def _confinement_hint(error: str, sandbox: PythonSandbox) -> str:
    if sandbox.config.mode != "bubblewrap":
        return ""
    if any(marker in error for marker in _NETWORK_ERRORS):
        return " (the sandbox has no network: no host, not even this machine's, is reachable)"
    if any(marker in error for marker in _FILE_ERRORS):
        return (f" (the sandbox sees only its working directory {INSIDE_WORK}, a private /tmp "
                "and read-only system files: other files do not exist for it, system files "
                "cannot be written)")
    return ""
