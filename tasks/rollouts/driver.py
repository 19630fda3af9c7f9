"""The closed-loop driver: every trial of a set of cases run against one model, concurrently.

A case is a (scenario, group) pair, tried ``settings.trials`` times. The driver opens what every
trial shares (the gateway with the model under test as ``student`` and the run's teacher as the
simulated user, the tool executor, the :class:`Episode`, the :class:`SimulatedUser`), asks the
caller how each case is put to the model (:data:`Frame`: its policy, system message and offered
tools), runs :func:`run_trial` for each, at most the role's ``max_concurrency`` at a time, and
returns every trial in case order. The evaluate stage scores models with it; build_preferences
samples the student with it. GRPO's rollouts are not run here: TRL drives those turn by turn
(``train/grpo_env.py`` answers the calls it is handed as the episode runner does, with its
:class:`~agentune.tasks.rollouts.episode.Counterparts`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.config.tools import ToolsConfig
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import open_episodes
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.environments.session import DEFAULT_NOW
from agentune.tasks.llm.gateway import LLMGateway
from agentune.tasks.llm.types import ChatGateway
from agentune.tasks.rollouts.closed_loop import (
    Policy,
    SimulatedUser,
    Trial,
    TrialSettings,
    run_trial,
)

G = TypeVar("G")
"""A case's group, as the caller describes it (a template, or just a name)."""


@dataclass(frozen=True)
class Framing:
    """How one case is put to the model under test."""

    group: str
    """The key its trials are recorded under (:attr:`Trial.group`)."""
    policy: Policy
    system: str | None
    """The system message, if the conversation opens with one."""
    tools: list[dict[str, Any]]
    """The OpenAI tools offered (those the policy was given)."""


Frame = Callable[[ChatGateway, ScenarioRecord, G], Framing]
"""The framing of a case: given the driver's gateway, the scenario and the group."""

Progress = Callable[[int, int], Awaitable[None]]
"""Called with (trials done, trials in all): once with 0 before the first trial starts, then
after each trial."""


@dataclass(frozen=True)
class CaseTrial:
    """One trial of a case: its scenario, the tools it was offered, the rollout and verdict."""

    record: ScenarioRecord
    tools: list[dict[str, Any]]
    trial: Trial


async def run_closed_loop(records: Sequence[ScenarioRecord], groups: Sequence[G],
                          frame: Frame[G], *, role: RoleConfig, llm: LLMConfig,
                          catalog: EnvironmentCatalog, tools: ToolsConfig,
                          verifier: VerifierConfig, settings: TrialSettings, stage: str,
                          now: dt.datetime = DEFAULT_NOW, on_progress: Progress | None = None
                          ) -> list[CaseTrial]:
    """Every (record, group) case ``settings.trials`` times with ``role`` as the model under
    test, in the order records x groups x trials; the run's other ``llm`` settings stay as they
    are (the teacher plays the simulated user and simulated environments, the judge checks facts
    where ``verifier.answer_judge`` is on; the engine, cache and budget apply to every role).
    ``now`` is the episodes' clock where a scenario has none of its own."""
    gateway_config = llm.with_student(role)
    jobs = [(record, group, trial) for record in records for group in groups
            for trial in range(settings.trials)]
    done = 0
    async with LLMGateway(gateway_config) as gateway, \
            open_episodes(catalog, tools, gateway=gateway, now=now, stage=stage) as episode:
        user = SimulatedUser(gateway, settings, stage)
        limit = asyncio.Semaphore(max(1, role.max_concurrency))
        if on_progress is not None:
            await on_progress(0, len(jobs))

        async def one(record: ScenarioRecord, group: G, trial: int) -> CaseTrial:
            nonlocal done
            framing = frame(gateway, record, group)
            async with limit:
                result = await run_trial(record, policy=framing.policy, episode=episode,
                                         user=user, system=framing.system, settings=settings,
                                         trial=trial, group=framing.group,
                                         verifier=verifier)
            done += 1
            if on_progress is not None:
                await on_progress(done, len(jobs))
            return CaseTrial(record, framing.tools, result)

        return list(await asyncio.gather(*(one(*job) for job in jobs)))
