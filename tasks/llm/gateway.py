"""The one door every LLM call goes through.

``LLMGateway.chat`` answers from the persistent cache when it can; otherwise it checks the run's
budget, waits for a slot under the role's concurrency and rate limits, reserves the call's worst
case in the run's budget ledger (``tasks/llm/budget.py``: persisted beside the cache, so a resumed
run continues the sum), calls the role's provider, retries transient faults with jittered
exponential backoff (honouring ``Retry-After``), stores the answer, settles the reservation at the
real usage and counts tokens and cost per (stage, role).

Use one gateway inside one event loop (its semaphores, limiters and HTTP clients belong to it).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import get_args

from aiolimiter import AsyncLimiter

from agentune.config.llm import LLMConfig, RoleConfig
from agentune.tasks.common.resources import AsyncResource
from agentune.tasks.llm.budget import LEDGER_FILE, BudgetLedger, Reservation
from agentune.tasks.llm.cache import ResponseCache
from agentune.tasks.llm.errors import (
    EndpointUnreachable,
    GatewayError,
    RetryableError,
)
from agentune.tasks.llm.local_models import LocalModels, shared_models
from agentune.tasks.llm.openai_provider import OpenAIProvider
from agentune.tasks.llm.tokens import PromptCounter
from agentune.tasks.llm.types import ChatRequest, ChatResult, Provider, Role, Usage
from agentune.tasks.llm.usage import UsageLedger, cost_of
from agentune.tasks.orchestration.limits import server_slot

log = logging.getLogger("agentune.llm")

ROLES: tuple[Role, ...] = get_args(Role)
# How far past the provider's own timeout the gateway gives up on a call it can no longer trust.
_BACKSTOP_FACTOR = 1.25
_BACKSTOP_EXTRA_S = 1.0


_run_name: ContextVar[str | None] = ContextVar("agentune_budget_run", default=None)


@contextmanager
def budget_run(name: str) -> Iterator[None]:
    """Gateways made inside share the persisted budget of the run ``name`` (see budget.py)."""
    token = _run_name.set(name)
    try:
        yield
    finally:
        _run_name.reset(token)


class TokenRateLimiter:
    """Tokens per minute as a leaky bucket of about one second's worth (the request limiter's
    reasoning: servers enforce sub-minute windows). A request larger than the bucket is admitted
    when the bucket is empty and counted whole, so the next ones wait for it to drain: over any
    stretch, the rate is the configured one whatever the request sizes. Callers are served in
    arrival order."""

    def __init__(self, per_minute: int, *, burst_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60
        self.capacity = max(1.0, self.rate * burst_s)
        self._clock = clock
        self._level = 0.0
        self._at = clock()
        self._lock = asyncio.Lock()

    def _drain(self) -> None:
        now = self._clock()
        self._level = max(0.0, self._level - (now - self._at) * self.rate)
        self._at = now

    async def acquire(self, tokens: int) -> None:
        async with self._lock:
            while True:
                self._drain()
                if self._level == 0 or self._level + tokens <= self.capacity:
                    self._level += tokens
                    return
                # Until the bucket holds room for this request (or is empty, for a big one).
                await asyncio.sleep((self._level - max(0.0, self.capacity - tokens)) / self.rate)


@dataclass
class _RoleLimits:
    """Admission control for one role: concurrent calls, requests and tokens per minute."""

    slots: asyncio.Semaphore
    requests: AsyncLimiter | None
    tokens: TokenRateLimiter | None

    @classmethod
    def of(cls, role: RoleConfig) -> _RoleLimits:
        requests = None
        if role.requests_per_minute is not None:
            # A bucket of about one second's worth instead of a whole minute's: servers that
            # enforce sub-minute windows (OpenAI does) would answer a full-minute burst with 429s.
            per_second = role.requests_per_minute / 60
            requests = (
                AsyncLimiter(per_second, 1.0)
                if per_second >= 1
                else AsyncLimiter(1, 1 / per_second)
            )
        tokens = TokenRateLimiter(role.tokens_per_minute) if role.tokens_per_minute else None
        return cls(asyncio.Semaphore(role.max_concurrency), requests, tokens)

    async def admit(self, token_estimate: int) -> None:
        if self.requests is not None:
            await self.requests.acquire()
        if self.tokens is not None:
            await self.tokens.acquire(token_estimate)


class LLMGateway(AsyncResource):
    """Answers chat requests for the teacher, judge and student roles of one run.

    ``providers`` replaces the configured provider of the roles it names (tests, custom backends);
    the gateway does not close providers it was given. Providers built from the config are made on
    first use, one per distinct ``RoleConfig``, so roles configured alike share one instance. Local
    roles are views over :attr:`models` (tasks/llm/local_models.py): roles of one model share its
    load whatever their other settings; a gateway made inside ``share_models`` shares the loads of
    the whole run.
    """

    def __init__(self, config: LLMConfig, providers: dict[Role, Provider] | None = None, *,
                 run: str | None = None) -> None:
        self.config = config
        self._given: dict[Role, Provider] = dict(providers or {})
        self._built: dict[str, Provider] = {}
        shared = shared_models()
        self.models = shared or LocalModels()
        """The local models its roles are answered by: the run's, or its own (closed with it)."""
        self._owns_models = shared is None
        self._limits = {role: _RoleLimits.of(self.role_config(role)) for role in ROLES}
        self._counters = {role: PromptCounter(self.role_config(role), local=role not in self._given)
                          for role in ROLES}
        self._ledger = UsageLedger()
        # The run whose persisted budget this gateway spends: given, or the one open_runtime
        # named; without one (a gateway made on its own) the budget lives in memory.
        self.run = run or _run_name.get()
        self._budget: BudgetLedger | None = None
        self._cache = (
            ResponseCache(Path(config.cache_dir) / "responses.sqlite") if config.cache else None
        )
        # Cache keys being answered right now: an identical request waits for that answer instead
        # of paying for it again.
        self._in_flight: dict[str, asyncio.Event] = {}

    def role_config(self, role: Role) -> RoleConfig:
        return getattr(self.config, role)

    def provider(self, role: Role) -> Provider:
        """The role's provider, built on first use."""
        if role in self._given:
            return self._given[role]
        config = self.role_config(role)
        identity = config.model_dump_json()
        if identity not in self._built:
            self._built[identity] = _build_provider(config, self.config.local_engine,
                                                    self.models)
        return self._built[identity]

    async def chat(self, role: Role, request: ChatRequest, *, stage: str) -> ChatResult:
        """Answer ``request`` as ``role`` on behalf of ``stage`` (the name used in usage tables).

        Raises ``BudgetExceeded`` when the run's cap is reached before a paid call,
        ``ModelUnavailable`` when a local role's model cannot be loaded, and ``GatewayError``
        when the call fails for good.
        """
        config = self.role_config(role)
        if request.max_tokens is None:
            request = request.model_copy(update={"max_tokens": config.default_max_tokens})
        if self._cache is None:
            return await self._answer(role, request, stage)
        key = request.cache_key(*self._identity(role))
        while (busy := self._in_flight.get(key)) is not None:
            await busy.wait()
        done = self._in_flight[key] = asyncio.Event()
        try:
            # Read inline (microseconds, never waits for a writer). Durable before used: the
            # answer is handed back only once the cache's writer thread has committed it, so a
            # run killed at any point has every answer its callers saw in the file and asks only
            # for the others again (tests/drills/test_durable_cache.py).
            hit = self._cache.get(key)
            if hit is not None:
                self._ledger.record_cached(stage, role)
                return hit
            result = await self._answer(role, request, stage)
            await self._cache.aput(key, result, role)
            return result
        finally:
            del self._in_flight[key]
            done.set()

    def usage_rows(self) -> list[dict[str, object]]:
        """Usage per (stage, role): requests, cached, retries, failures, tokens, cost."""
        return self._ledger.rows()

    def cache_stats(self) -> dict[str, float] | None:
        """The response cache's write statistics (``ResponseCache.stats``); None without one."""
        return self._cache.stats() if self._cache is not None else None

    def usage_total(self) -> dict[str, object]:
        """The whole run's usage, with the same counters as ``usage_rows``."""
        total = self._ledger.total()
        return {"stage": "all", "role": "all", **asdict(total)}

    @property
    def budget(self) -> BudgetLedger:
        """The run's budget ledger, opened on first use (a killed run's is continued)."""
        if self._budget is None:
            path = Path(self.config.cache_dir) / LEDGER_FILE if self.run else ":memory:"
            self._budget = BudgetLedger(path, self.run or "in-memory", self.config.budget)
            if self._budget.reclaimed:
                log.warning("budget of run %r: %d call(s) in flight when an earlier process of it "
                            "died counted as spent at their worst case", self.run,
                            self._budget.reclaimed)
        return self._budget

    def finish_run(self) -> None:
        """The run completed: the next one of its name starts a new budget."""
        if self.run:
            self.budget.finish()

    async def aclose(self) -> None:
        """Close the providers this gateway built, its own local models, the cache and the
        budget ledger."""
        for provider in self._built.values():
            await provider.aclose()
        self._built.clear()
        if self._owns_models:
            await self.models.aclose()
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        if self._budget is not None:
            self._budget.close()
            self._budget = None


    def _identity(self, role: Role) -> tuple[str, str]:
        """(provider, model) for the cache key, known without building the provider."""
        if role in self._given:
            given = self._given[role]
            return given.name, given.model
        config = self.role_config(role)
        return self.config.answering_provider(role), config.model

    async def _answer(self, role: Role, request: ChatRequest, stage: str) -> ChatResult:
        """One paid answer: limits, budget, retries and accounting around the provider call."""
        config = self.role_config(role)
        limits = self._limits[role]
        budget = self.config.budget
        capped = budget.max_tokens is not None or budget.max_cost is not None
        # The prompt's size (the role's tokenizer when local, else an estimate) is needed only by
        # the token-rate limiter and the budget's reservations.
        prompt_tokens = (
            self._counters[role].count(request) if limits.tokens is not None or capped else 0
        )
        max_tokens = request.max_tokens or 0
        worst_tokens = prompt_tokens + max_tokens
        worst_cost = cost_of(Usage(prompt_tokens=prompt_tokens, completion_tokens=max_tokens),
                             config)
        where = f"before a {role} call for stage {stage!r}"
        attempt = 0
        while True:
            reservation: Reservation | None = None
            try:
                self.budget.check(where)
                provider = self.provider(role)
                async with limits.slots, server_slot(self.config.global_concurrency_limit, role):
                    await limits.admit(worst_tokens)
                    # Checked and reserved in one step after the wait: calls in flight hold
                    # their worst case, so together they cannot pass the cap.
                    if capped:
                        reservation = self.budget.reserve(stage, role, worst_tokens, worst_cost,
                                                          where)
                    try:
                        result = await self._call(provider, config, request)
                    except BaseException:
                        self.budget.release(reservation)
                        raise
            except RetryableError as exc:
                if attempt >= config.max_retries:
                    self._ledger.record_failure(stage, role)
                    raise EndpointUnreachable(
                        f"{role} call for stage {stage!r} failed after {attempt + 1} attempts "
                        f"({_describe(provider, config)}): {exc}"
                    ) from exc
                if exc.retry_after is not None and exc.retry_after > config.max_retry_after_s:
                    # Honouring an hour-long Retry-After would stall the run silently.
                    self._ledger.record_failure(stage, role)
                    raise EndpointUnreachable(
                        f"{role} call for stage {stage!r}: the server asks to retry after "
                        f"{exc.retry_after:g} s, more than llm.{role}.max_retry_after_s = "
                        f"{config.max_retry_after_s:g} ({_describe(provider, config)}): {exc}"
                    ) from exc
                delay = random.uniform(
                    0, min(config.backoff_max_s, config.backoff_base_s * 2**attempt)
                )
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                attempt += 1
                self._ledger.record_retry(stage, role)
                log.info(
                    "%s call for stage %r: retry %d/%d in %.2f s after: %s",
                    role,
                    stage,
                    attempt,
                    config.max_retries,
                    delay,
                    exc,
                )
                await asyncio.sleep(delay)
            except GatewayError as exc:
                self._ledger.record_failure(stage, role)
                raise GatewayError(f"{role} call for stage {stage!r}: {exc}") from exc
            else:
                cost = cost_of(result.usage, config)
                self.budget.settle(reservation, stage, role, result.usage.prompt_tokens,
                                   result.usage.completion_tokens, cost)
                self._ledger.record_answer(stage, role, result.usage, cost)
                return result

    async def _call(
        self, provider: Provider, config: RoleConfig, request: ChatRequest
    ) -> ChatResult:
        # The provider enforces the timeout itself; this backstop only catches one that does not.
        if config.request_timeout_s is None:
            return await provider.complete(request)
        backstop_s = config.request_timeout_s * _BACKSTOP_FACTOR + _BACKSTOP_EXTRA_S
        try:
            return await asyncio.wait_for(provider.complete(request), backstop_s)
        except TimeoutError:
            raise RetryableError(f"no answer within {backstop_s:g} s (gateway backstop)") from None

def _build_provider(config: RoleConfig, local_engine: str, models: LocalModels) -> Provider:
    if config.provider == "openai":
        return OpenAIProvider(config)
    return models.provider(config, local_engine)


def _describe(provider: Provider, config: RoleConfig) -> str:
    endpoint = config.base_url or ("in-process" if config.provider == "local" else "the OpenAI API")
    return f"provider {provider.name}, model {provider.model!r}, endpoint {endpoint}"
