"""The local provider's vLLM engine (tasks/llm/vllm_engine.py) through the gateway: the server
started on the first request and waited for, requests answered through it, stopped with the
gateway; a server that dies mid-run fails the call with a clear error, and the next run (a new
server) resumes from the response cache. A stand-in OpenAI server (Python's http.server) plays
vLLM, so this runs in seconds; tests/llm/test_vllm_server.py runs the real one."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.llm.errors import GatewayError, ModelUnavailable
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.local_models import share_models
from agentune.tasks.llm.types import ChatRequest
from agentune.tasks.llm.vllm_engine import VllmEngine
from agentune.tasks.llm.vllm_server import VllmServer

# /health, and chat completions answering "echo: <last message>"; its pid in argv[2].
STAND_IN = r"""
import http.server, json, os, sys
open(sys.argv[2], "w").write(str(os.getpid()))
class Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = "echo: " + body["messages"][-1]["content"]
        answer = json.dumps({"id": "x", "object": "chat.completion", "created": 0,
            "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass
print("stand-in serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Server).serve_forever()
"""


def _role() -> RoleConfig:
    return RoleConfig(provider="local", model="embedded", max_retries=0, backoff_base_s=0)


def _gateway(tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch,
             script: str = STAND_IN) -> LLMGateway:
    """A gateway whose teacher is the vLLM engine, ``script`` (the stand-in) playing the server."""
    server = VllmServer(tmp_path, "stand-in", tmp_path / run / "server.log",
                        command=(sys.executable, "-c", script, "{port}",
                                 str(tmp_path / f"{run}.pid")))
    monkeypatch.setattr(VllmEngine, "_new_server", lambda self: server)
    return LLMGateway(LLMConfig(teacher=_role(), local_engine="vllm",
                                cache_dir=str(tmp_path / "cache")))


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], temperature=0.0,
                       max_tokens=8)


def test_the_engine_has_its_own_identity() -> None:
    assert LLMConfig(local_engine="vllm").identities("teacher") == {
        "teacher": {"provider": "local-vllm", "model": "embedded"}}
    assert LLMConfig().identities("teacher")["teacher"]["provider"] == "local"
    served = RoleConfig(provider="openai", model="m", base_url="http://127.0.0.1:1/v1")
    assert LLMConfig(local_engine="vllm", teacher=served).answering_provider("teacher") == \
        "openai"


async def test_started_on_first_request_and_stopped_with_the_gateway(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _gateway(tmp_path, "first", monkeypatch) as gateway:
        assert not (tmp_path / "first.pid").exists()  # nothing started before a request
        answer = await gateway.chat("teacher", _ask("hello"), stage="test")
        assert answer.content == "echo: hello" and answer.model == "embedded"
        pid = int((tmp_path / "first.pid").read_text())
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        for _ in range(200):
            os.kill(pid, 0)
            await asyncio.sleep(0.05)


async def test_a_crash_mid_run_fails_clearly_and_the_next_run_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _gateway(tmp_path, "crashing", monkeypatch) as gateway:
        assert (await gateway.chat("teacher", _ask("one"), stage="test")).content == "echo: one"
        os.kill(int((tmp_path / "crashing.pid").read_text()), signal.SIGKILL)
        with pytest.raises(GatewayError, match=r"exited with -9.*\n.*stand-in serving"):
            await gateway.chat("teacher", _ask("two"), stage="test")
    async with _gateway(tmp_path, "again", monkeypatch) as gateway:
        one = await gateway.chat("teacher", _ask("one"), stage="test")
        two = await gateway.chat("teacher", _ask("two"), stage="test")
    assert one.cached and one.content == "echo: one"
    assert not two.cached and two.content == "echo: two"


async def test_a_server_that_cannot_start_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model vLLM cannot load: not one failed call to record and go on after, but the run's
    stop, with the server's own last words."""
    failing = "import sys; print('no weights in the folder', flush=True); sys.exit(3)"
    async with _gateway(tmp_path, "broken", monkeypatch, failing) as gateway:
        with pytest.raises(ModelUnavailable, match=r"exited with 3.*\n.*no weights") as raised:
            await gateway.chat("teacher", _ask("one"), stage="test")
    assert not isinstance(raised.value, GatewayError)


async def test_gateways_inside_share_models_ask_one_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluate stage's gateways (tasks/llm/local_models.py): roles alike in what a server
    is started with ask one server, started once and stopped with the gateway owning the pool."""
    servers: list[VllmServer] = []

    def new_server(engine: VllmEngine) -> VllmServer:
        servers.append(VllmServer(tmp_path, "stand-in", tmp_path / "shared" / "server.log",
                                  command=(sys.executable, "-c", STAND_IN, "{port}",
                                           str(tmp_path / f"{len(servers)}.pid"))))
        return servers[-1]

    monkeypatch.setattr(VllmEngine, "_new_server", new_server)
    config = LLMConfig(teacher=_role(), local_engine="vllm", cache=False,
                       student=_role().model_copy(update={"tool_format": "chat_template"}))
    async with LLMGateway(LLMConfig(local_engine="vllm", cache=False)) as owner:
        with share_models(owner.models):
            for role in ("teacher", "student"):
                async with LLMGateway(config) as gateway:
                    answer = await gateway.chat(role, _ask(role), stage="test")
                    assert answer.content == f"echo: {role}"
        assert len(servers) == 1
        pid = int((tmp_path / "0.pid").read_text())
        os.kill(pid, 0)  # running after the gateways closed
    with pytest.raises(ProcessLookupError):
        for _ in range(200):
            os.kill(pid, 0)
            await asyncio.sleep(0.05)
