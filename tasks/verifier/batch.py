"""Verifying a file of trajectories against published scenarios (``agentune env verify``).

Each trajectory row names its scenario (``scenario_id``) and holds either OpenAI ``messages`` or a
template's ``steps`` with the ``protocol`` that reads them (``tools``, when given, lets ReAct-style
parsers map an input to its parameter). ``truncated: true`` marks one stopped at a cap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentune.config.verifier import VerifierConfig
from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.verifier.rollout import Rollout, from_messages, from_steps
from agentune.tasks.verifier.verify import Verdict, verify


def rollout_of(row: Mapping[str, Any], where: str, row_name: str) -> Rollout:
    truncated = bool(row.get("truncated"))
    if row.get("messages") is not None:
        messages = list(row["messages"])
        if not all(isinstance(m, Mapping) for m in messages):
            raise InputError(where, row_name, "messages", "must be a list of message objects")
        return from_messages(messages, truncated=truncated)
    if row.get("steps") is not None and row.get("protocol"):
        return from_steps(list(row["steps"]), str(row["protocol"]),
                          tools=list(row.get("tools") or []), truncated=truncated)
    raise InputError(where, row_name, "messages", "give messages, or steps and their protocol")


async def verify_rows(records: Mapping[str, ScenarioRecord], rows: Sequence[Mapping[str, Any]],
                      episode: Episode, config: VerifierConfig, *,
                      where: str) -> list[tuple[str, str, Verdict]]:
    """(trajectory id, scenario id, verdict) for every row; a row naming no known scenario is an
    error naming the row."""
    out = []
    for i, row in enumerate(rows):
        name = f"row {i}"
        scenario_id = row.get("scenario_id")
        if scenario_id not in records:
            raise InputError(where, name, "scenario_id", f"{scenario_id!r} is not among the "
                             f"{len(records)} scenarios")
        record = records[str(scenario_id)]
        rollout = rollout_of(row, where, name)
        verdict = await verify(record.scenario, record.expected_state, rollout, episode, config,
                               initial_state=record.start_state, now=record.now)
        out.append((str(row.get("id", name)), str(scenario_id), verdict))
    return out
