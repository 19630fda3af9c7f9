"""A real JSON-over-HTTP server for tests of remote tool clients: starlette + uvicorn in a thread.

Each route is answered by a script, a list of actions used in order (then ``default``) or a
callable ``(body, n) -> action`` with ``n`` counting that route's requests from 0::

    script = [JsonReply({"error": "busy"}, status=429), JsonReply(answer)]
    with JsonTestServer({"/run_code": script}) as srv:
        ...  # POST to srv.url("/run_code"); srv.requests["/run_code"] holds the bodies
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support.loopback_server import LoopbackServer


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


class JsonTestServer(LoopbackServer):
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
        super().__init__([Route(path, self._handle, methods=["POST"]) for path in self.routes],
                         name="json-test-server")

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
            await self.pause(action.seconds)
            action = action.then
        return JSONResponse(action.body, status_code=action.status, headers=dict(action.headers))
