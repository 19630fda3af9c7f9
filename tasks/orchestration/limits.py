"""Prefect global concurrency limits shared by every run against one server, one per LLM role.

The gateway's own limits (``RoleConfig.max_concurrency``, rates) hold within one run. Deployments
running at the same time each have their own gateway, so with ``llm.global_concurrency_limit`` on
the gateway also takes a slot of the server-wide limit ``llm-<role>`` around each paid call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.concurrency.asyncio import concurrency
from prefect.settings import PREFECT_API_URL


def limit_name(role: str) -> str:
    """The global concurrency limit for a role's endpoint, e.g. ``llm-teacher``."""
    return f"llm-{role}"


@asynccontextmanager
async def server_slot(enabled: bool, role: str) -> AsyncIterator[None]:
    """Hold one slot of the role's server-wide limit; a no-op when disabled or when there is no
    server (a run on Prefect's ephemeral API has no PREFECT_API_URL)."""
    if not enabled or not PREFECT_API_URL.value():
        yield
        return
    # strict=False: a server without the limit logs a warning and lets the call through.
    async with concurrency(limit_name(role), occupy=1, strict=False):
        yield
