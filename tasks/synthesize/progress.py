"""Progress of a running synthesis: log lines with done/total and rate, and, inside a Prefect run,
a progress artifact the UI shows as a bar. Updates are throttled (a line per ``every_s`` seconds,
and always the last one) so that thousands of trajectories do not flood the log or the API.

The rate and the time left are counted in attempts, not in trajectories: a scenario finishes only
when its last attempt does, and with k attempts each the scenarios in flight all finish near the
end (a new user saw "~294 min left" at 1 of 42 for a stage that took 23 min). The attempts still
planned are every unfinished combination's attempts not yet run; those a scenario does not need
(it passed first) leave the plan when it finishes, so the estimate can only fall faster."""

from __future__ import annotations

import logging
import time
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from prefect.logging import get_run_logger

from agentune.tasks.orchestration.reporting import artifact_key, in_prefect_run

_log = logging.getLogger("agentune.synthesis")


class SynthesisProgress:
    def __init__(self, total: int, *, attempts: int = 0, resumed: int = 0,
                 key: str = "synthesize-progress", every_s: float = 5.0) -> None:
        self.total = total
        self.resumed = resumed
        """Combinations already finished by an earlier, interrupted run."""
        self.done = resumed
        self.accepted = 0
        self.rejected = 0
        self.planned = attempts
        """Attempts this run may still make, counting those done (an upper bound)."""
        self.attempted = 0
        self.key = artifact_key(key)
        self.every_s = every_s
        self._started = time.monotonic()
        self._last = 0.0
        self._artifact: UUID | None = None
        self._logger = get_run_logger() if in_prefect_run() else _log

    def _line(self) -> str:
        elapsed = time.monotonic() - self._started
        rate = self.attempted / elapsed * 60 if elapsed > 0 else 0.0
        left = self.planned - self.attempted
        eta = f", ~{left / rate:.1f} min left" if rate > 0 and left else ""
        resumed = f" ({self.resumed} from the checkpoint)" if self.resumed else ""
        return (f"synthesize: {self.done}/{self.total} trajectories{resumed}, "
                f"{self.accepted} accepted, {self.rejected} rejected this run; "
                f"{self.attempted}/{self.planned} attempts, {rate:.1f}/min{eta}")

    async def start(self) -> None:
        self._logger.info(self._line())
        if in_prefect_run():
            self._artifact = await acreate_progress_artifact(
                progress=self._percent(), key=self.key,
                description="synthesize: attempts made of those planned")

    def _percent(self) -> float:
        return 100.0 * self.attempted / self.planned if self.planned else 100.0

    async def attempted_one(self) -> None:
        """An attempt of this run finished."""
        self.attempted += 1
        await self._report()

    async def advance(self, accepted: bool, unused: int = 0) -> None:
        """A combination finished; ``unused``: its attempts that will not run (it passed)."""
        self.done += 1
        self.accepted += accepted
        self.rejected += not accepted
        self.planned -= unused
        await self._report()

    async def _report(self) -> None:
        now = time.monotonic()
        if self.done < self.total and now - self._last < self.every_s:
            return
        self._last = now
        self._logger.info(self._line())
        if self._artifact is not None:
            await aupdate_progress_artifact(self._artifact, self._percent(),
                                            description=self._line())
