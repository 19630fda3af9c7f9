"""JSON-over-HTTP transport for remote tool services, with their limits and retries.

One ``HttpToolService`` per service URL: at most ``max_in_flight`` requests at once (MindSpeed-RL's
``rate_limit``), optionally at most ``requests_per_second``, and bounded retries with full-jitter
exponential backoff on 429 (honouring ``Retry-After``), 5xx, timeouts and connection failures.
A 4xx other than 429 is not retried. When the retries run out the failure is a ``ToolFailure``
(``rate_limited``, ``timeout`` or ``http``), which the executor turns into an observation.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import httpx
from aiolimiter import AsyncLimiter

from agentune.config.tools import HttpServiceConfig
from agentune.tasks.llm.openai_provider import retry_after_s
from agentune.tasks.tools.observation import ErrorKind, ToolFailure

log = logging.getLogger("agentune.tools")


class _Transient(Exception):
    def __init__(self, kind: ErrorKind, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.retry_after = retry_after


class HttpToolService:
    """POSTs JSON bodies to one URL and returns the decoded JSON answers.

    Use it inside one event loop; its HTTP client is made on first use and closed by ``aclose``.
    """

    def __init__(self, config: HttpServiceConfig) -> None:
        self.config = config
        self.url = config.url
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._rate = None
        if config.requests_per_second is not None:
            rps = config.requests_per_second
            # A one-second bucket (or one request per period below 1/s): no minute-long bursts.
            self._rate = AsyncLimiter(rps, 1.0) if rps >= 1 else AsyncLimiter(1, 1 / rps)

    async def post(self, body: dict[str, Any]) -> Any:
        attempt = 0
        while True:
            try:
                return await self._post_once(body)
            except _Transient as exc:
                if attempt >= self.config.max_retries:
                    tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
                    raise ToolFailure(exc.kind, f"{exc} (gave up after {tries})") from None
                delay = random.uniform(
                    0, min(self.config.backoff_max_s, self.config.backoff_base_s * 2**attempt)
                )
                if (
                    exc.retry_after is not None
                ):  # the server's wish wins; the tool timeout bounds it
                    delay = max(delay, exc.retry_after)
                attempt += 1
                log.info(
                    "%s: retry %d/%d in %.2f s after: %s",
                    self.url,
                    attempt,
                    self.config.max_retries,
                    delay,
                    exc,
                )
                await asyncio.sleep(delay)

    async def _post_once(self, body: dict[str, Any]) -> Any:
        async with self._slots:
            if self._rate is not None:
                await self._rate.acquire()
            try:
                response = await self._http().post(self.url, json=body)
            except httpx.TimeoutException:
                raise _Transient(
                    "timeout",
                    f"{self.url} did not answer within {self.config.request_timeout_s:g} s",
                ) from None
            except httpx.TransportError as exc:
                raise _Transient("http", f"cannot reach {self.url}: {exc!r}") from None
        status = response.status_code
        if status == 429:
            raise _Transient(
                "rate_limited",
                f"{self.url} answered 429 Too Many Requests",
                retry_after_s(response.headers),
            )
        if status >= 500:
            raise _Transient(
                "http",
                f"{self.url} answered HTTP {status}: {response.text[:200]}",
                retry_after_s(response.headers),
            )
        if status >= 400:
            raise ToolFailure("http", f"{self.url} answered HTTP {status}: {response.text[:200]}")
        try:
            return response.json()
        except ValueError:
            raise ToolFailure(
                "http", f"{self.url} answered with a body that is not JSON: {response.text[:200]!r}"
            ) from None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.config.request_timeout_s,
                limits=httpx.Limits(max_connections=self.config.max_in_flight),
                trust_env=False,  # a proxy from the environment must not capture tool traffic
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
