"""Starting, health-waiting on and stopping a server process (tasks/llm/vllm_server.py), with a
stand-in server (a few lines of Python's http.server) in place of vLLM's entry point, so the
tests run in seconds without the vLLM venv. tests/llm/test_vllm_server.py starts the real one."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.vllm_server import VllmServer, healthy

# Healthy after `delay` seconds; writes its pid first, so the test can see it gone.
STAND_IN = """
import http.server, os, sys, time
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(float(sys.argv[3]))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def _server(tmp_path: Path, script: str, *args: str, timeout_s: float = 60) -> VllmServer:
    return VllmServer(tmp_path, "stand-in", tmp_path / "server.log", start_timeout_s=timeout_s,
                      command=(sys.executable, "-c", script, "{port}", *args))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int) -> bool:
    for _ in range(100):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_start_waits_for_health_and_stop_ends_it(tmp_path: Path) -> None:
    server = _server(tmp_path, STAND_IN, str(tmp_path / "pid"), "1.0")
    started = time.monotonic()
    with server:
        assert time.monotonic() - started >= 1.0  # it waited for the late /health
        assert healthy(server.base_url.removesuffix("/v1") + "/health")
        server.check()  # running: no error
        pid = int((tmp_path / "pid").read_text())
    assert _wait_gone(pid)
    assert not healthy(server.base_url.removesuffix("/v1") + "/health")


def test_a_server_that_exits_while_starting_fails_with_its_log(tmp_path: Path) -> None:
    server = _server(tmp_path, "import sys; print('no model here'); sys.exit(3)")
    with pytest.raises(GatewayError, match=r"exited with 3 while starting:\n.*no model here"):
        server.start()


def test_a_server_never_healthy_is_stopped(tmp_path: Path) -> None:
    server = _server(tmp_path, STAND_IN, str(tmp_path / "pid"), "600", timeout_s=1.5)
    with pytest.raises(GatewayError, match="not healthy within 1.5 s"):
        server.start()
    assert _wait_gone(int((tmp_path / "pid").read_text()))


def test_a_crash_after_start_is_reported(tmp_path: Path) -> None:
    server = _server(tmp_path, STAND_IN, str(tmp_path / "pid"), "0")
    with server:
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        for _ in range(100):
            try:
                server.check()
            except GatewayError as exc:
                assert "exited with -9" in str(exc) and "serving" in str(exc)
                break
            time.sleep(0.05)
        else:
            pytest.fail("check() did not see the crash")
