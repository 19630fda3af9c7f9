"""The local models a run has loaded, each loaded once and shared by every gateway of the run.

An :class:`LLMGateway` asks its local roles through a :class:`LocalModels` pool: on the
transformers engine, one loaded :class:`LocalModel` per (model, dtype, device), each role asking
it through a view of its own (its batch size, tool format, chat template, default max_tokens and
recent prefixes: it answers as a model of its own would); on the vLLM engine, one server per
distinct set of the settings it is started with. A gateway made alone owns its pool (its roles
of one model share one load; closing it frees them). One made inside :func:`share_models` asks
the pool given there and loads nothing of its own: the evaluate stage's benchmarks, each with
gateways of their own, ask the models its runtime's gateway holds, freed when that gateway
closes.

A pool belongs to one event loop, as a gateway does (a vLLM engine's client is bound to it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from agentune.config.llm import RoleConfig
from agentune.tasks.common.resources import AsyncResource
from agentune.tasks.llm.errors import GatewayError
from agentune.tasks.llm.types import ChatRequest, ChatResult, Provider

if TYPE_CHECKING:  # both pull in their engines (torch, an HTTP client) when imported
    from agentune.tasks.llm.local_provider import LocalModel
    from agentune.tasks.llm.vllm_engine import VllmEngine


class LocalModels(AsyncResource):
    """Loaded local models (and started vLLM servers) by what decides them; closing frees them."""

    def __init__(self) -> None:
        self._loaded: dict[str, LocalModel] = {}
        self._servers: dict[str, VllmEngine] = {}
        self._closed = False

    def provider(self, role: RoleConfig, engine: str = "transformers") -> Provider:
        """``role`` (provider ``local``) answered by ``engine`` with the model this pool holds
        for it, loaded (or started) on its first request. Closing the provider leaves the
        model to the pool."""
        if self._closed:
            raise GatewayError(f"the run's local models are closed: {role.model!r} cannot answer")
        if engine == "vllm":
            from agentune.tasks.llm.vllm_engine import VllmEngine

            key = role.model_dump_json(include=set(VllmEngine.SETTINGS))
            if key not in self._servers:
                self._servers[key] = VllmEngine(role)
            return _Borrowed(self._servers[key])
        from agentune.tasks.llm.local_provider import LocalModel, LocalProvider

        key = role.model_dump_json(include=set(LocalModel.SETTINGS))
        if key not in self._loaded:
            self._loaded[key] = LocalModel(role)
        return LocalProvider(role, engine=self._loaded[key])

    async def aclose(self) -> None:
        """Free every loaded model and stop every server; no role asks through this pool after."""
        self._closed = True
        for engine in [*self._loaded.values(), *self._servers.values()]:
            await engine.aclose()
        self._loaded.clear()
        self._servers.clear()


class _Borrowed:
    """A pooled vLLM engine as one gateway holds it: closing it leaves the server to the pool."""

    def __init__(self, engine: Provider) -> None:
        self._engine = engine
        self.name, self.model = engine.name, engine.model

    async def complete(self, request: ChatRequest) -> ChatResult:
        return await self._engine.complete(request)

    async def aclose(self) -> None:
        """Nothing: the pool stops the server."""


_shared: ContextVar[LocalModels | None] = ContextVar("agentune_local_models", default=None)


@contextmanager
def share_models(models: LocalModels) -> Iterator[None]:
    """Gateways made inside ask their local roles through ``models`` (loading nothing of their
    own), which outlives them: its owner closes it."""
    token = _shared.set(models)
    try:
        yield
    finally:
        _shared.reset(token)


def shared_models() -> LocalModels | None:
    """The pool of the innermost :func:`share_models`, if any."""
    return _shared.get()
