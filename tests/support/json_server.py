"""A real JSON-over-HTTP server for tests of remote tool clients: starlette + uvicorn in a thread.

Each route is answered by a script, a list of actions used in order (then ``default``) or a
callable ``(body, n) -> action`` with ``n`` counting that route's requests from 0::

    script = [JsonReply({"error": "busy"}, status=429), JsonReply(answer)]
    with JsonTestServer({"/run_code": script}) as srv:
        ...  # POST to srv.url("/run_code"); srv.requests["/run_code"] holds the bodies
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True)
class JsonReply:
    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stall:
    """Say nothing for ``seconds`` (cut short when the server stops), then answer ``then``."""

    seconds: float
    then: JsonReply = field(default_factory=lambda: JsonReply({}))


JsonAction = JsonReply | Stall
RouteScript = Sequence[JsonAction] | Callable[[Any, int], JsonAction]


class JsonTestServer:
    def __init__(
        self,
        routes: Mapping[str, RouteScript],
        *,
        default: JsonAction = JsonReply({"error": "script exhausted"}, status=500),
    ) -> None:
        self.routes = dict(routes)
        self.default = default
        self.requests: dict[str, list[Any]] = {path: [] for path in routes}
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        app = Starlette(
            routes=[Route(path, self._handle, methods=["POST"]) for path in self.routes]
        )
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_config=None, log_level="warning", timeout_graceful_shutdown=5)
        )
        self._thread = threading.Thread(target=self._run, name=f"json-test-server-{self.port}")
        self._thread.daemon = True
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self, timeout_s: float = 10.0) -> JsonTestServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"JSON test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> JsonTestServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            await self._server.serve(sockets=[self._socket])

        asyncio.run(serve())

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        body = await request.json()
        with self._lock:
            n = len(self.requests[path])
            self.requests[path].append(body)
        script = self.routes[path]
        if callable(script):
            action = script(body, n)
        else:
            action = script[n] if n < len(script) else self.default
        if isinstance(action, Stall):
            assert self._stopping is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), action.seconds)
            action = action.then
        return JSONResponse(action.body, status_code=action.status, headers=dict(action.headers))
