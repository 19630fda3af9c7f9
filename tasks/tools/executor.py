"""The one door every tool call goes through during synthesis.

``ToolExecutor.execute(name, arguments, context=...)`` looks the tool up, validates the arguments
against its JSON schema, fills in schema defaults, waits for one of the tool's concurrency slots,
runs the implementation under the tool's time limit, and returns an :class:`Observation` whose
content is cut to the tool's token budget (and scanned for planted instructions:
``Observation.injection``). It never raises for anything a call does: an unknown
tool, bad arguments, a timeout, a crash inside the tool are all observations the agent sees.
Only a :class:`~agentune.tasks.llm.errors.RunStop` propagates (the run's LLM budget reached,
or a simulated tool's local model unloadable).

Use one executor inside one event loop (its semaphores and HTTP clients belong to that loop), and
close it with ``aclose`` (or ``async with``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentune.config.tools import Implementation, ToolLimits, ToolsConfig
from agentune.tasks.common.resources import AsyncResource
from agentune.tasks.llm.errors import RunStop
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.tools.arguments import validate_arguments, with_defaults
from agentune.tasks.tools.calculator import Calculator
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.dates import Clock, DateCalculator
from agentune.tasks.tools.documents import (
    DocumentIndex,
    DocumentPages,
    DocumentSearch,
    Encyclopedia,
)
from agentune.tasks.tools.observation import (
    ErrorKind,
    Observation,
    ToolAnswer,
    ToolBackend,
    ToolContext,
    ToolFailure,
    ToolKind,
    injection_phrases,
    to_content,
)
from agentune.tasks.tools.sandbox import PythonInterpreter, PythonSandbox, SandboxUnavailable
from agentune.tasks.tools.sandbox_fusion import SandboxFusionInterpreter
from agentune.tasks.tools.search_r1 import RetrievalSearch
from agentune.tasks.tools.simulator import SimulatedTool
from agentune.tasks.tools.truncation import Tokenizer, truncate_observation
from agentune.tasks.tools.units import UnitConverter

log = logging.getLogger("agentune.tools")


class ToolSetupError(ValueError):
    """A catalog and tools config that cannot work together; the message names the tool."""


class _Resources:
    """What several tools share, made once and only when a bound tool needs it."""

    def __init__(self, config: ToolsConfig) -> None:
        self.config = config
        self._index: DocumentIndex | None = None
        self._sandbox: PythonSandbox | None = None

    def index(self) -> DocumentIndex:
        if self._index is None:
            self._index = DocumentIndex.from_folder(Path(self.config.documents))
        return self._index

    def sandbox(self) -> PythonSandbox:
        if self._sandbox is None:
            self._sandbox = PythonSandbox(self.config.sandbox)
            log.info(
                "python sandbox: %s, runs as %s",
                self._sandbox.isolation,
                self._sandbox.user,
            )
        return self._sandbox


_FACTORIES: dict[Implementation, Callable[[_Resources], ToolBackend]] = {
    "calculator": lambda r: Calculator(),
    "unit_converter": lambda r: UnitConverter(),
    "date_calculator": lambda r: DateCalculator(),
    "clock": lambda r: Clock(r.config.now),
    "python_sandbox": lambda r: PythonInterpreter(r.sandbox()),
    "document_search": lambda r: DocumentSearch(r.index()),
    "encyclopedia": lambda r: Encyclopedia(r.index()),
    "document_pages": lambda r: DocumentPages(r.index()),
    "sandbox_fusion": lambda r: SandboxFusionInterpreter(r.config.sandbox_fusion),
    "search_r1": lambda r: RetrievalSearch(r.config.retrieval),
}


class SessionTool:
    """Backend of a tool an environment owns: the episode's session answers it."""

    required: tuple[str, ...] = ()

    def __init__(self, name: str, kind: ToolKind) -> None:
        self.name = name
        self.kind = kind

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        if context.session is None:
            raise ToolFailure("execution", f"{self.name} belongs to an environment and runs "
                              "only inside an episode of it")
        return await context.session.call(self.name, arguments, context)


class ToolExecutor(AsyncResource):
    """Executes the calls of one catalog.

    ``gateway`` answers simulated tools (the teacher role); it is needed only when some tool is
    simulated. ``tokenizer`` (Hugging Face style) measures observation budgets exactly; without
    it they are estimated from characters. ``environment_tools`` names the tools environments own
    (and how they run); those are answered by the ``session`` of each call's context.
    """

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        config: ToolsConfig,
        *,
        gateway: ChatGateway | None = None,
        tokenizer: Tokenizer | None = None,
        environment_tools: Mapping[str, ToolKind] | None = None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.tools = {tool.name: tool for tool in tools}
        resources = _Resources(config)
        self._backends: dict[str, ToolBackend] = {}
        unbound = []
        owned = dict(environment_tools or {})
        for tool in tools:
            if tool.name in owned:
                self._backends[tool.name] = SessionTool(tool.name, owned[tool.name])
                continue
            impl = config.implementations.get(tool.name)
            if impl is None:
                unbound.append(tool)
                continue
            try:
                backend = _FACTORIES[impl](resources)
            except SandboxUnavailable as exc:
                raise ToolSetupError(f"tool {tool.name!r} ({impl}) is refused: {exc}") from None
            _check_parameters(tool, impl, backend.required)
            self._backends[tool.name] = backend
        if unbound and not config.simulate_unbound:
            names = ", ".join(t.name for t in unbound)
            raise ToolSetupError(
                f"no implementation for tools {names} and tools.simulate_unbound is off"
            )
        if unbound and gateway is None:
            names = ", ".join(t.name for t in unbound)
            raise ToolSetupError(f"tools {names} are simulated, which needs an LLM gateway")
        for tool in unbound:
            assert gateway is not None
            self._backends[tool.name] = SimulatedTool(tool, gateway, config.simulation, config.now)
        self._slots = {
            name: asyncio.Semaphore(self._limits(name).max_concurrency or 1)
            for name in self._backends
        }

    def kind_of(self, name: str) -> ToolKind | None:
        backend = self._backends.get(name)
        return backend.kind if backend is not None else None

    def kinds(self) -> dict[str, ToolKind]:
        """Every tool's kind (real, http or simulated), for run summaries."""
        return {name: backend.kind for name, backend in self._backends.items()}

    async def execute(
        self, name: str, arguments: Any, *, context: ToolContext | None = None
    ) -> Observation:
        """Run one call; every outcome but a ``RunStop`` comes back as an Observation."""
        context = context or ToolContext()
        started = time.monotonic()
        backend = self._backends.get(name)
        if backend is None:
            # No list of the catalog here: it would show the agent tools it was not offered.
            return self._failure(
                name, None, "unknown_tool", {"error": f"unknown tool {name!r}"}, started
            )
        tool = self.tools[name]
        problems = validate_arguments(tool.parameters, arguments)
        if problems:
            message = f"invalid arguments for {name}: " + "; ".join(str(p) for p in problems)
            fields = [p.field for p in problems if p.field]
            payload = {"error": message, **({"fields": fields} if fields else {})}
            return self._failure(name, backend.kind, "invalid_arguments", payload, started)
        filled = with_defaults(tool.parameters, arguments)
        limits = self._limits(name)
        try:
            async with self._slots[name]:
                answer = await asyncio.wait_for(backend.run(filled, context), limits.timeout_s)
        except RunStop:
            raise
        except ToolFailure as failure:
            return self._failure(
                name,
                backend.kind,
                failure.kind,
                failure.content(),
                started,
                injected=failure.injected,
            )
        except TimeoutError:
            message = f"{name} did not answer within {limits.timeout_s:g} s"
            return self._failure(name, backend.kind, "timeout", {"error": message}, started)
        except Exception as exc:  # a fault in a tool must not end the trajectory
            log.exception("tool %s failed on %r", name, filled)
            message = f"{name} failed: {type(exc).__name__}: {exc}"
            return self._failure(name, backend.kind, "execution", {"error": message}, started)
        cached = isinstance(answer, ToolAnswer) and answer.cached
        payload = answer.payload if isinstance(answer, ToolAnswer) else answer
        return self._observation(
            name, backend.kind, True, to_content(payload), None, started, cached=cached
        )

    def _limits(self, name: str) -> ToolLimits:
        backend = self._backends.get(name)
        return self.config.limit(
            name, simulated=backend is not None and backend.kind == "simulated"
        )

    def _failure(
        self,
        name: str,
        kind: ToolKind | None,
        error_kind: ErrorKind,
        payload: Any,
        started: float,
        *,
        injected: bool = False,
    ) -> Observation:
        return self._observation(
            name, kind, False, to_content(payload), error_kind, started, injected=injected
        )

    def _observation(
        self,
        name: str,
        kind: ToolKind | None,
        ok: bool,
        content: str,
        error_kind: ErrorKind | None,
        started: float,
        *,
        injected: bool = False,
        cached: bool = False,
    ) -> Observation:
        limits = self._limits(name)
        assert limits.max_tool_response_length is not None and limits.tool_response_truncate_side is not None
        cut = truncate_observation(
            content, limits.max_tool_response_length, limits.tool_response_truncate_side, self.tokenizer
        )
        # Scanned after the cut: what the agent never reads cannot steer it.
        return Observation(
            tool=name,
            kind=kind,
            ok=ok,
            content=cut.text,
            error_kind=error_kind,
            elapsed_s=time.monotonic() - started,
            truncated=cut.truncated,
            content_tokens=cut.tokens,
            injected_error=injected,
            cached=cached,
            injection=injection_phrases(cut.text),
        )

    async def aclose(self) -> None:
        for backend in self._backends.values():
            close = getattr(backend, "aclose", None)
            if close is not None:
                await close()



def _check_parameters(tool: ToolSpec, impl: str, required: Sequence[str]) -> None:
    """An implementation reads fixed argument names: the tool's schema must offer them."""
    properties = tool.parameters.get("properties", {})
    missing = [name for name in required if name not in properties]
    if missing:
        raise ToolSetupError(
            f"tool {tool.name!r} is bound to implementation {impl!r}, which needs the "
            f"parameters {', '.join(missing)}; the tool's schema has "
            f"{', '.join(properties) or 'none'}"
        )
