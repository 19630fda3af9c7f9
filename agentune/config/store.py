"""Where the versioned artifact store lives."""

from __future__ import annotations

from pydantic import Field

from agentune.config.strict import Strict


class StoreConfig(Strict):
    root: str = Field("data/artifacts", description="Root folder of the versioned artifact store.")
