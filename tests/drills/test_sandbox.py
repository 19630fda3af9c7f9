"""Sandbox drills: hostile programs against the Python tool under bubblewrap.

Each drill runs a program a teacher could write and checks that it is contained and that the
tool result says why (the ``ToolFailure`` message the agent sees). Each one fails when the
protection it tests is taken away: under ``tools.sandbox: unsafe_local`` (OS limits, nobody)
the secret, home, /proc, write and socket drills fail, without ``max_processes`` the fork bomb
runs to the wall clock, without the memory limit the memory bomb succeeds, without the CPU
limit the loop runs to the wall clock. Skipped where bwrap cannot run (``make`` installs it as
root with apt).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentune.config.tools import SandboxConfig, ToolsConfig
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.executor import ToolExecutor, ToolSetupError
from agentune.tasks.tools.observation import ToolContext, ToolFailure
from agentune.tasks.tools.sandbox import PythonInterpreter, PythonSandbox, SandboxUnavailable

LIMITS = {"cpu_time_s": 2, "memory_mb": 256, "wall_time_s": 20, "max_file_mb": 1,
          "max_processes": 32}
SECRET = "agentune-drill-secret-" + uuid.uuid4().hex


def make_tool(**overrides) -> PythonInterpreter:
    return PythonInterpreter(PythonSandbox(SandboxConfig(**{**LIMITS, **overrides})))


@pytest.fixture(scope="module")
def tool() -> PythonInterpreter:
    tool = make_tool()
    try:
        tool.sandbox.isolation
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    return tool


async def refused(tool: PythonInterpreter, code: str) -> ToolFailure:
    """Run ``code``; it must fail. Its output must not carry the secret."""
    with pytest.raises(ToolFailure) as failed:
        result = await tool.run({"code": code}, ToolContext())
        print("unexpected success:", result)
    assert SECRET not in str(failed.value.content())
    return failed.value


@pytest.fixture
def root_only_file(tmp_path: Path) -> Path:
    """A 0600 file in a folder anyone may enter: only its owner (or root's capabilities) reads it."""
    os.chmod(tmp_path, 0o755)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return secret


async def test_a_root_only_file_cannot_be_read(tool, root_only_file: Path) -> None:
    failure = await refused(tool, f"print(open({str(root_only_file)!r}).read())")
    assert failure.kind == "execution"
    assert "No such file or directory" in failure.message
    assert "the sandbox sees only its working directory /sandbox" in failure.message


@pytest.fixture
def file_in_home() -> Iterator[Path]:
    home = Path(os.path.expanduser("~"))
    planted = home / f".agentune-drill-{uuid.uuid4().hex}"
    planted.write_text(SECRET)
    planted.chmod(0o644)  # world-readable: only the mount namespace keeps it out
    try:
        yield planted
    finally:
        planted.unlink(missing_ok=True)


async def test_the_users_home_cannot_be_read(tool, file_in_home: Path) -> None:
    failure = await refused(tool, f"print(open({str(file_in_home)!r}).read())")
    assert "No such file or directory" in failure.message
    # The home folder shows at most the path down to the interpreter, never its other files.
    listing = await tool.run({"code": f"import os\nsorted(os.listdir({str(file_in_home.parent)!r}))"
                              " if os.path.isdir(" + repr(str(file_in_home.parent)) + ") else []"},
                             ToolContext())
    assert file_in_home.name not in listing.get("result", "")
    assert len(eval(listing.get("result", "[]"))) <= 1


async def test_proc_of_the_parent_is_not_visible(tool) -> None:
    me = os.getpid()
    failure = await refused(
        tool, f"print(open('/proc/{me}/cmdline').read(), open('/proc/{me}/environ').read())"
    )
    assert "No such file or directory" in failure.message
    # Only the sandbox's own processes are in its /proc.
    seen = await tool.run({"code": "import os\nsorted(int(p) for p in os.listdir('/proc') "
                           "if p.isdigit())"}, ToolContext())
    assert me not in eval(seen["result"]) and len(eval(seen["result"])) <= 4


async def test_nothing_outside_the_work_dir_can_be_written(tool, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)  # writable by anyone: only the mount namespace keeps it out
    target = tmp_path / "planted.txt"
    failure = await refused(tool, f"open({str(target)!r}, 'w').write('x')")
    assert "No such file or directory" in failure.message
    assert not target.exists()
    for path in ("/usr/agentune-drill", "/agentune-drill"):
        failure = await refused(tool, f"open({path!r}, 'w').write('x')")
        assert "Read-only file system" in failure.message or "Permission denied" in failure.message
        assert not Path(path).exists()
    # /tmp is the sandbox's own: a file written there is not on this machine's /tmp.
    name = f"agentune-drill-{uuid.uuid4().hex}"
    wrote = await tool.run({"code": f"open('/tmp/{name}', 'w').write('x')"}, ToolContext())
    assert wrote["result"] == "1" and not (Path("/tmp") / name).exists()


async def test_a_fork_bomb_stops_at_the_process_limit(tool) -> None:
    started = time.monotonic()
    # A doubling bomb, bounded at 2**9 processes so that it cannot hurt the machine where the
    # limit is missing (it then runs to the wall clock instead). The first process only starts
    # the bomb and sleeps: the one that reaches the limit must end it too.
    failure = await refused(
        tool,
        "import os, time\nif os.fork() == 0:\n    for _ in range(9):\n        os.fork()\n"
        "time.sleep(60)",
    )
    assert failure.kind == "resource_limit"
    assert failure.message == "the program tried to run more than 32 processes at once"
    assert time.monotonic() - started < LIMITS["wall_time_s"]


async def test_a_memory_bomb_stops_at_the_memory_limit(tool) -> None:
    failure = await refused(tool, "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))")
    assert failure.kind == "resource_limit"
    assert failure.message == "the program needed more than 256 MiB of memory"


async def test_an_infinite_loop_stops_at_the_cpu_limit(tool) -> None:
    started = time.monotonic()
    failure = await refused(tool, "while True:\n    pass")
    assert failure.kind == "resource_limit"
    assert failure.message == "the program used more than 2 s of CPU time"
    assert time.monotonic() - started < LIMITS["wall_time_s"]


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on this machine's 127.0.0.1 that records what it is sent."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                received.append(conn.recv(1024))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


async def test_a_socket_to_loopback_reaches_nothing(tool, listener) -> None:
    port, received = listener
    failure = await refused(
        tool, f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        f"s.sendall({SECRET!r}.encode())"
    )
    assert "Connection refused" in failure.message
    assert "the sandbox has no network" in failure.message
    time.sleep(0.3)
    assert received == []
    # Control: the listener does answer from outside the sandbox.
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(b"ping")
    deadline = time.monotonic() + 3
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received == [b"ping"]


async def test_no_capabilities_are_left(tool) -> None:
    status = await tool.run({"code": "print(open('/proc/self/status').read())"}, ToolContext())
    caps = dict(line.split(":\t") for line in status["stdout"].splitlines()
                if line.startswith("Cap"))
    assert {caps[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == {"0" * 16}
    if os.geteuid() == 0:
        assert caps["CapBnd"].strip() == "0" * 16


# ---- where bwrap cannot run --------------------------------------------------------------------


PYTHON_TOOL = ToolSpec(
    name="run_python", description="Run Python code.",
    parameters={"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)


def test_without_bwrap_the_python_tool_is_refused_naming_the_way_out(monkeypatch) -> None:
    import shutil

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap"
                        else real_which(name, *a, **k))
    config = ToolsConfig(implementations={"run_python": "python_sandbox"})
    with pytest.raises(ToolSetupError) as refused_setup:
        ToolExecutor([PYTHON_TOOL], config)
    message = str(refused_setup.value)
    assert "tool 'run_python' (python_sandbox) is refused" in message
    assert "bwrap` is not installed" in message and "apt-get install bubblewrap" in message
    assert "tools.sandbox: unsafe_local" in message
    # Set explicitly, the weaker sandbox is used.
    unsafe = ToolsConfig.model_validate({"implementations": {"run_python": "python_sandbox"},
                                         "sandbox": "unsafe_local"})
    assert unsafe.sandbox.mode == "unsafe_local"
    ToolExecutor([PYTHON_TOOL], unsafe)
