"""The program that runs inside a sandbox child process (started by ``tasks/tools/sandbox.py``).

Standard library only, and it never imports agentune: it is started as a plain script with
``python -I``. It limits its own process (CPU time, address space, file size, no core dumps),
installs the audit hook when asked, then runs the user's program
like a notebook cell: statements first, then the last expression, whose ``repr`` goes to the value
file descriptor (the tool's "value of the last expression").

Its exit status tells the parent what happened: 0 success, 1 an exception (traceback on stderr),
``EXIT_MEMORY`` a ``MemoryError``; death by SIGXCPU means the CPU limit. (Python ignores SIGXFSZ,
so the file-size limit shows as an ``OSError`` and a full output file, which the parent checks.)
A process of the program's that cannot start another at the process limit (``EAGAIN`` from fork or
spawn) writes ``PROCESS_LIMIT_MARK`` on stderr and kills the program's whole process group: the
others would otherwise run on to the wall clock.
"""

from __future__ import annotations

import ast
import errno
import json
import linecache
import os
import resource
import signal
import sys
import traceback
from types import TracebackType

EXIT_MEMORY = 86  # any status of ours but 1 (an exception) and 120 (Python's flush failure at exit)
PROCESS_LIMIT_MARK = "ProcessLimit: "

# Audit events refused when the sandbox cannot have its own network namespace: every socket, and
# every way of starting another program (which would not carry the hook along).
_BLOCKED_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.sendto",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
    }
)


def _refuse(event: str, args: tuple[object, ...]) -> None:
    if event in _BLOCKED_EVENTS:
        raise PermissionError(f"{event} is not allowed in the sandbox (no network, no processes)")


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    resource.setrlimit(kind, (soft, soft if hard is None else hard))


def _run(source: str, value_fd: int, max_value_chars: int) -> int:
    # Tracebacks show the program's lines (the file is not at "main.py" for linecache to find).
    linecache.cache["main.py"] = (len(source), None, source.splitlines(True), "main.py")
    tree = ast.parse(source, filename="main.py")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": "main.py"}
    exec(compile(tree, "main.py", "exec"), namespace)
    if last is not None:
        value = eval(compile(last, "main.py", "eval"), namespace)
        if value is not None:
            os.write(value_fd, repr(value)[:max_value_chars].encode("utf-8", "replace"))
    return 0


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the user's first frame on (this runner's frames left out)."""
    while tb is not None and tb.tb_frame.f_code.co_filename != "main.py":
        tb = tb.tb_next
    return tb


def _starts_a_process(tb: TracebackType | None, limit: int) -> bool:
    """Whether the failing call was a fork or spawn (EAGAIN is also non-blocking I/O's error):
    by the code that failed, or by the sandbox's tasks (its own PID namespace: /proc lists only
    them) being near the limit."""
    text = "".join(traceback.format_tb(tb))
    if any(word in text for word in ("fork", "spawn", "Popen", "_execute_child")):
        return True
    try:
        tasks = sum(len(os.listdir(f"/proc/{pid}/task")) for pid in os.listdir("/proc")
                    if pid.isdigit())
    except OSError:
        return False
    return tasks >= limit // 2


def main() -> int:
    settings = json.loads(sys.argv[1])
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_CPU, settings["cpu_s"], settings["cpu_s"] + 1)
    _limit(resource.RLIMIT_AS, settings["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, settings["file_bytes"])
    if settings.get("processes"):
        _limit(resource.RLIMIT_NPROC, settings["processes"])
    with open(settings["program"], encoding="utf-8") as program:
        source = program.read()
    if settings["audit_hook"]:
        sys.addaudithook(_refuse)
    sys.argv = ["main.py"]
    try:
        return _run(source, settings["value_fd"], settings["max_value_chars"])
    except MemoryError:
        sys.stderr.write("MemoryError: the program exceeded its memory limit\n")
        return EXIT_MEMORY
    except SystemExit:
        raise
    except BlockingIOError as exc:
        traceback.print_exception(type(exc), exc, _user_frames(exc.__traceback__))
        if exc.errno != errno.EAGAIN or not settings.get("processes") \
                or not _starts_a_process(exc.__traceback__, settings["processes"]):
            return 1
        sys.stderr.write(
            f"{PROCESS_LIMIT_MARK}no new process: the sandbox allows {settings['processes']} at once\n"
        )
        sys.stderr.flush()
        # The first process to reach the limit is often not the program's first one, which would
        # sleep or wait on: end every process of the program (this one included) now.
        os.killpg(0, signal.SIGKILL)
        return 1  # not reached
    except BaseException as exc:  # the user's error, reported as Python would
        traceback.print_exception(type(exc), exc, _user_frames(exc.__traceback__))
        return 1


if __name__ == "__main__":
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the file-size limit: the parent sees the full file
        pass
    sys.exit(code)
