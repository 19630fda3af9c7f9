"""What every stage run holds: the store and the LLM gateway built from one run config."""

from __future__ import annotations

from contextlib import asynccontextmanager
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agentune.config import RunConfig
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.store import ArtifactStore


@dataclass
class Runtime:
    config: RunConfig
    store: ArtifactStore
    gateway: LLMGateway


@asynccontextmanager
async def open_runtime(config: RunConfig) -> AsyncIterator[Runtime]:
    """The store and a gateway for one stage run; the gateway's connections close at the end."""
    gateway = LLMGateway(config.llm)
    try:
        yield Runtime(config=config, store=ArtifactStore(config.store.root), gateway=gateway)
    finally:
        await gateway.aclose()
