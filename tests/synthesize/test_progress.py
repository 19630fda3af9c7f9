"""Synthesis progress (tasks/synthesize/progress.py): rate and time left counted in attempts, so
the estimate is right while scenarios are still in flight; attempts a scenario no longer needs
leave the plan."""

from __future__ import annotations

import logging

import pytest

from agentune.tasks.synthesize import progress as progress_module
from agentune.tasks.synthesize.progress import SynthesisProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_estimate_counts_attempts(monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    caplog.set_level(logging.INFO, logger="agentune.synthesis")
    # 4 scenarios of 3 attempts each; no scenario has finished after 6 minutes.
    progress = SynthesisProgress(4, attempts=12, every_s=0)
    await progress.start()
    for _ in range(6):
        clock.now += 60
        await progress.attempted_one()
    line = caplog.records[-1].getMessage()
    assert "0/4 trajectories" in line and "6/12 attempts, 1.0/min, ~6.0 min left" in line
    # A scenario that passed at its first attempt frees its other two.
    await progress.advance(True, unused=2)
    assert "1/4 trajectories, 1 accepted" in caplog.records[-1].getMessage()
    assert "6/10 attempts, 1.0/min, ~4.0 min left" in caplog.records[-1].getMessage()


async def test_lines_are_throttled_but_the_last_is_shown(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    caplog.set_level(logging.INFO, logger="agentune.synthesis")
    progress = SynthesisProgress(2, attempts=2, every_s=5.0, resumed=0)
    await progress.start()
    clock.now += 10
    await progress.attempted_one()  # shown: 10 s since the last
    await progress.advance(False)  # within 5 s: not shown
    await progress.attempted_one()
    await progress.advance(True)  # the last: always shown
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[-1].startswith("synthesize: 2/2 trajectories, 1 accepted, 1 rejected this run; "
                                "2/2 attempts")
