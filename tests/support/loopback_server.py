"""What every test HTTP server here shares: a starlette app served by uvicorn on 127.0.0.1 (a free
port) in a background thread, started and stopped as a context manager.

Subclasses give the routes; handlers that wait use :meth:`LoopbackServer.pause`, which wakes at
once when the server stops, so shutdown never waits on a scripted hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route


class Startable:
    """``with server:`` starts it and stops it, whatever ``start`` and ``stop`` do."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class LoopbackServer(Startable):
    def __init__(self, routes: Sequence[Route], *, name: str) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: uvicorn writes a response's headers and body
        # separately, and with Nagle's algorithm the body would wait for the client's delayed
        # ACK (~40 ms on Linux) before it is sent.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.name = name
        self._server = uvicorn.Server(uvicorn.Config(
            Starlette(routes=list(routes)), log_config=None, log_level="warning",
            timeout_graceful_shutdown=5, backlog=4096,
        ))
        self._thread = threading.Thread(target=self._run, name=f"{name}-{self.port}", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self, timeout_s: float = 10.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def on_start(self) -> None:
        """Runs on the server's event loop before it accepts connections."""

    async def pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops."""
        if seconds <= 0:
            return
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            await self.on_start()
            await self._server.serve(sockets=[self._socket])

        asyncio.run(serve())
