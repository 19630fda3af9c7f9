"""What can go wrong in an LLM call, classified so the gateway knows whether a retry can help."""

from __future__ import annotations


class GatewayError(RuntimeError):
    """A call that failed for good; the message names the role, provider and endpoint."""


class RetryableError(Exception):
    """A transient fault (429, 5xx, timeout, broken body). ``retry_after`` is the server's wish, in s."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EndpointUnreachable(GatewayError):
    """Transient faults (429, 5xx, timeouts, broken bodies, no connection) outlasted the retries,
    or the server asked for a longer wait than the role allows: the endpoint may answer later,
    so what depended on this call is worth asking again in a later run."""


class RunStop(RuntimeError):
    """No later call of the run can succeed: the run stops here.

    Not a :class:`GatewayError`: code that tolerates a failed call (a rejected trajectory, a
    failed trial, a tool's error shown to the agent) must let it through, or a stage would
    publish a score or a data set made of nothing but such failures."""


class BudgetExceeded(RunStop):
    """The run's token or money cap is reached: no further paid call is made."""


class ModelUnavailable(RunStop):
    """A local role's model cannot be loaded or served at all (a missing or broken folder, an
    engine that does not start): every call of the run would fail the same way."""
