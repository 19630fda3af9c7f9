"""What every stage run holds: the store and the LLM gateway built from one run config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from agentune.config import RunConfig
from agentune.config.llm import RoleConfig
from agentune.tasks.llm.gateway import LLMGateway, budget_run
from agentune.tasks.orchestration.reporting import announce_version
from agentune.tasks.store.artifact_store import ArtifactStore


@dataclass
class Runtime:
    config: RunConfig
    store: ArtifactStore
    gateway: LLMGateway


_active: ContextVar[Runtime | None] = ContextVar("agentune_runtime", default=None)


@asynccontextmanager
async def open_runtime(config: RunConfig, *, student: RoleConfig | None = None
                       ) -> AsyncIterator[Runtime]:
    """The store and gateway for a run; ``student``: the role the gateway asks as ``student``
    in place of ``llm.student`` (synthesize's messages form: the teacher asked natively).

    A stage flow called inside the pipeline joins the pipeline's runtime, so the whole run shares
    one gateway: one budget, one set of rate limits, one loaded local model. A stage run alone,
    or one that asks another student, gets its own, closed at the end.
    """
    active = _active.get()
    if active is not None and active.config == config and student is None:
        yield active
        return
    # The budget's run: this config's name and the flow started (pipeline, or a stage alone).
    # Every gateway made inside (the evaluate stage makes its own) spends the same budget.
    with budget_run(f"{config.name}/{_flow_name()}"):
        gateway = LLMGateway(config.llm if student is None
                             else config.llm.model_copy(update={"student": student}))
        # Each version a stage publishes is announced in the Prefect UI (a no-op outside a run).
        store = ArtifactStore(config.store.root, on_publish=announce_version)
        runtime = Runtime(config=config, store=store, gateway=gateway)
        token = _active.set(runtime)
        try:
            yield runtime
            # Completed: the next run of this config and flow gets a new budget. A run killed,
            # failed or stopped by its budget stays open, and its next start continues the sum.
            gateway.finish_run()
        finally:
            _active.reset(token)
            await gateway.aclose()


def _flow_name() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.flow_name or "run")
