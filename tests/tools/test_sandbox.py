"""The local Python sandbox: results, and the limits that hold a hostile or buggy program.

Limits are kept small (1 s CPU, 128 MiB, a few seconds of wall clock) so the file runs in seconds.
The default mode (bubblewrap) is tested where bwrap can run (``make`` installs it as root with
apt); the containment drills are in tests/drills/test_sandbox.py. Network refusal is checked
against a real server listening on this machine's loopback, under bubblewrap and both
``unsafe_local`` isolation modes (the namespace one only where the system permits it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agentune.config.tools import SandboxConfig
from agentune.tasks.tools.observation import ToolContext, ToolFailure
from agentune.tasks.tools.sandbox import PythonInterpreter, PythonSandbox, SandboxUnavailable

from support.json_server import JsonReply, JsonTestServer

SMALL = {"cpu_time_s": 1, "memory_mb": 128, "wall_time_s": 4, "max_file_mb": 1}


def sandbox(**overrides) -> PythonSandbox:
    return PythonSandbox(SandboxConfig(**{**SMALL, **overrides}))


def bubblewrap_or_skip(**overrides) -> PythonSandbox:
    box = sandbox(**overrides)
    try:
        box.isolation
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    return box


@pytest.fixture(scope="module", params=["bubblewrap", "unsafe_local"])
def auto_sandbox(request: pytest.FixtureRequest) -> PythonSandbox:
    if request.param == "bubblewrap":
        return bubblewrap_or_skip()
    return sandbox(mode="unsafe_local")


@pytest.fixture(scope="module")
def listener():
    with JsonTestServer({"/ping": lambda body, n: JsonReply({"pong": True})}) as srv:
        yield srv


async def test_an_interpreter_under_tmp_runs_in_the_sandbox(tmp_path: Path) -> None:
    """The sandbox's /tmp is private and empty; a venv under /tmp (a checkout there, as CI's
    fresh clones are) is bound on top of it, not hidden by it."""
    import subprocess
    import sys

    assert str(tmp_path).startswith("/tmp/")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bubblewrap_or_skip()  # bubblewrap runs here with the test's own interpreter
    box = sandbox(python=str(venv / "bin" / "python"))
    assert box.isolation == "bubblewrap"  # refused when the venv is hidden under the new /tmp
    run = await box.run("6 * 7")
    assert run.status == "ok" and run.value == "42", run.stderr


async def test_output_and_last_expression(auto_sandbox: PythonSandbox) -> None:
    run = await auto_sandbox.run(
        "import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n6 * 7"
    )
    assert run.status == "ok" and run.exit_code == 0
    assert run.stdout == "hello\n" and run.stderr == "warn\n" and run.value == "42"


async def test_exception_is_reported_with_the_users_traceback_only(auto_sandbox) -> None:
    run = await auto_sandbox.run("x = 1\n1 / 0")
    assert run.status == "error" and run.exit_code == 1
    assert 'File "main.py", line 2' in run.stderr
    assert run.stderr.strip().endswith("ZeroDivisionError: division by zero")
    assert "sandbox_child" not in run.stderr


async def test_syntax_error_and_exit_status(auto_sandbox) -> None:
    bad = await auto_sandbox.run("def f(:\n  pass")
    assert bad.status == "error" and "SyntaxError" in bad.stderr
    exited = await auto_sandbox.run("import sys\nprint('bye')\nsys.exit(3)")
    assert exited.status == "error" and exited.exit_code == 3 and exited.stdout == "bye\n"


async def test_infinite_loop_hits_the_cpu_limit(auto_sandbox) -> None:
    started = time.monotonic()
    run = await auto_sandbox.run("while True:\n    pass")
    assert run.status == "cpu_limit"
    assert time.monotonic() - started < SMALL["wall_time_s"]


async def test_sleeping_program_hits_the_wall_clock() -> None:
    started = time.monotonic()
    run = await sandbox(wall_time_s=1.5).run(
        "import time\nprint('start', flush=True)\ntime.sleep(60)"
    )
    elapsed = time.monotonic() - started
    assert run.status == "timeout" and run.exit_code is None
    assert run.stdout == "start\n"
    assert 1.4 < elapsed < 5


async def test_memory_bomb_hits_the_memory_limit(auto_sandbox) -> None:
    one_shot = await auto_sandbox.run("x = bytearray(4 * 1024**3)")
    assert one_shot.status == "memory_limit"
    growing = await auto_sandbox.run(
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))"
    )
    assert growing.status == "memory_limit"
    assert "MemoryError" in growing.stderr


async def test_runaway_printing_is_bounded(auto_sandbox) -> None:
    run = await auto_sandbox.run("while True:\n    print('x' * 1000)")
    assert run.status == "output_limit"
    assert run.output_truncated and len(run.stdout) == auto_sandbox.config.max_output_chars


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


async def test_program_cannot_start_a_process_that_outlives_it(auto_sandbox) -> None:
    if auto_sandbox.isolation == "audit_hook":
        pytest.skip("under the audit hook a program cannot start processes at all")
    # Control: a child the program waits for runs.
    waited = await auto_sandbox.run(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'print(5)'], check=True, capture_output=True)"
        ".stdout.decode()"
    )
    assert waited.status == "ok" and waited.value == "'5\\n'"
    # A child left running when the program ends is killed with it.
    marker = f"agentune-outlive-{os.getpid()}-{time.monotonic_ns()}"
    run = await auto_sandbox.run(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', {marker!r}])\n"
        "import time; time.sleep(0.5)"
    )
    assert run.status == "ok"
    deadline = time.monotonic() + 5
    while _host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _host_processes_with(marker) == []


async def test_working_directory_is_fresh_and_environment_clean(monkeypatch, auto_sandbox) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    first = await auto_sandbox.run("import os\nopen('note.txt', 'w').write('x')\nos.getcwd()")
    second = await auto_sandbox.run(
        "import os\nsorted(os.listdir('.')), os.environ.get('OPENAI_API_KEY')"
    )
    assert first.status == "ok" and second.status == "ok"
    assert second.value == "([], None)"
    if auto_sandbox.isolation == "bubblewrap":
        assert first.value == "'/sandbox'"
    else:
        assert not os.path.exists(first.value.strip("'"))


async def test_runs_as_an_unprivileged_user(auto_sandbox) -> None:
    run = await auto_sandbox.run("import os\nos.geteuid()")
    if auto_sandbox.isolation == "bubblewrap":
        assert run.status == "ok" and int(run.value) != 0 or os.geteuid() != 0
        if os.geteuid() == 0:
            assert int(run.value) == 65534 or int(run.value) >= 1_900_000_000
        denied = await auto_sandbox.run("open('/etc/agentune-sandbox-test', 'w')")
        assert denied.status == "error" and "/etc/agentune-sandbox-test" in denied.stderr
    elif os.geteuid() == 0 and auto_sandbox.user == "nobody":
        assert run.value == "65534"
        denied = await auto_sandbox.run("open('/etc/agentune-sandbox-test', 'w')")
        assert denied.status == "error" and "PermissionError" in denied.stderr
    else:
        assert run.value == str(os.geteuid())
    assert not os.path.exists("/etc/agentune-sandbox-test")


NETWORK_PROBE = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    print("CONNECTED")
except OSError as exc:
    print("REFUSED", type(exc).__name__, exc)
"""


async def test_network_refused_under_the_audit_hook(listener) -> None:
    box = sandbox(mode="unsafe_local", network_isolation="audit_hook")
    assert box.isolation == "audit_hook"
    run = await box.run(NETWORK_PROBE.format(port=listener.port))
    assert "CONNECTED" not in run.stdout
    assert "REFUSED PermissionError" in run.stdout and "not allowed in the sandbox" in run.stdout
    spawn = await box.run("import subprocess\nsubprocess.run(['true'])")
    assert spawn.status == "error" and "subprocess.Popen is not allowed" in spawn.stderr


@pytest.mark.parametrize("mode", ["bubblewrap", "unsafe_local"])
async def test_network_refused_in_a_network_namespace(listener, mode: str) -> None:
    if mode == "bubblewrap":
        box = bubblewrap_or_skip()
    else:
        box = sandbox(mode="unsafe_local", network_isolation="auto")
        if box.isolation != "namespace":
            pytest.skip("this system does not permit network namespaces (unshare --net)")
    run = await box.run(NETWORK_PROBE.format(port=listener.port))
    assert "CONNECTED" not in run.stdout and run.stdout.startswith("REFUSED")
    # The listener is reachable from outside the sandbox, so the refusal is the namespace's.
    import httpx

    assert httpx.post(listener.url("/ping"), json={}).json() == {"pong": True}


async def test_interpreter_tool_maps_outcomes_to_observations(auto_sandbox) -> None:
    tool = PythonInterpreter(auto_sandbox)
    context = ToolContext()
    ok = await tool.run({"code": "print(sum(range(101)))\nsum(range(101))"}, context)
    assert ok == {"stdout": "5050\n", "result": "5050"}
    with pytest.raises(ToolFailure) as failed:
        await tool.run({"code": "raise ValueError('bad input')"}, context)
    assert failed.value.kind == "execution" and failed.value.message == "ValueError: bad input"
    assert "Traceback" in failed.value.details["stderr"]
    with pytest.raises(ToolFailure) as slow:
        await tool.run({"code": "import time\ntime.sleep(30)", "timeout_seconds": 1}, context)
    assert slow.value.kind == "timeout" and "1 s" in slow.value.message
    with pytest.raises(ToolFailure) as hungry:
        await tool.run({"code": "x = bytearray(4 * 1024**3)"}, context)
    assert hungry.value.kind == "resource_limit" and "128 MiB" in hungry.value.message
