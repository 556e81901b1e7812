"""Who is calling and whether their limits let them: what every route but readiness checks
before doing anything.

Two budgets per key, so one kind of traffic cannot starve the other: writes (ingested items and
commands, HABITUS_RATE_LIMIT_PER_MINUTE) and reads (RPC methods that change nothing and
PROFILE.md, HABITUS_READ_RATE_LIMIT_PER_MINUTE). Under one budget, an ingest burst used up the
key's minute and `prompt.context`, the read every agent turn makes, was refused with it.

Rate limits count ingested items, not requests: one batch of 1,000 costs what 1,000 single posts
do, so ingest authenticates first and charges once it knows how many items the batch holds.
Ingest alone is also subject to backpressure (services.gateway.backpressure): reads and commands
never are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from fastapi import Request
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from habitus.bus.rpc import RpcError
from habitus.contract import METHODS
from habitus.service.context import ServiceContext
from services.gateway.auth import Caller, KeyCache, authenticate
from services.gateway.backpressure_monitor import Backpressure
from services.gateway.body_limit import BodyReader
from services.gateway.errors import GatewayError
from services.gateway.ratelimit import LeasedBudget, RateLimiter

log = logging.getLogger(__name__)

Budget = Literal["write", "read"]


def budget_of(method: str) -> Budget:
    """Which budget an RPC method is charged to: a command (`changes_state` in the RPC table)
    writes; everything else reads. A name the table lacks changes nothing (nobody implements
    it, or it is a test's own service), so it reads."""
    spec = METHODS.get(method)
    return "write" if spec is not None and spec.changes_state else "read"


class Access:
    """The key cache, the two rate limiters and backpressure of one app, and the checks made
    with them."""

    def __init__(self, ctx: ServiceContext) -> None:
        settings = ctx.settings
        self.settings = settings
        self.keys = KeyCache(ctx.pool, ttl=settings.key_cache_seconds,
                             last_known=settings.key_last_known_max)
        self.limiters: dict[Budget, RateLimiter] = {
            "write": RateLimiter(ctx.redis, settings.rate_limit_per_minute),
            "read": RateLimiter(ctx.redis, settings.read_rate_limit_per_minute, scope="read"),
        }
        #: the reads answered from memory charge leased units, without a round trip
        self.read_lease = LeasedBudget(self.limiters["read"], settings.read_lease_units)
        self.backpressure = Backpressure(ctx.js, ctx.redis, settings)
        self.bodies = BodyReader(settings.max_body_bytes, timeout=settings.body_timeout_seconds,
                                 slow_after=settings.slow_body_seconds,
                                 max_slow=settings.max_slow_bodies)
        self._redis = ctx.redis

    def _per_minute(self, budget: Budget) -> int:
        s = self.settings
        return s.read_rate_limit_per_minute if budget == "read" else s.rate_limit_per_minute

    async def caller_for(self, request: Request, cost: int = 1,
                         budget: Budget = "write") -> Caller:
        """The authenticated caller, charged `cost` of its `budget`."""
        caller = await authenticate(request, self.keys)
        await self.charge(caller, cost, budget)
        return caller

    async def charge(self, caller: Caller, cost: int, budget: Budget = "write") -> None:
        """Take `cost` from the caller's `budget`: 429 with Retry-After when it is used up, 413
        when `cost` alone exceeds it (waiting cannot help)."""
        self._check_cost(cost, budget)
        allowed, retry_after = await self.limiters[budget].allow(caller.principal.key_hash, cost)
        self._refuse_unless(allowed, retry_after, budget)

    async def charge_and_read(self, caller: Caller, cost: int, budget: Budget,
                              reads: Callable[[Pipeline], None]) -> list[Any] | None:
        """`charge`, with the Redis reads `reads` queues sent in the same round trip: the
        read every agent turn makes (`prompt.context`'s cache entry) waits for one answer,
        not two. Their results, in order; None when Redis failed (the charge then lets the
        call through, as `charge` does, and the reads count as a miss)."""
        self._check_cost(cost, budget)
        limiter = self.limiters[budget]
        try:
            pipe = self._redis.pipeline(transaction=False)  # the charge is one script
            charge = limiter.queue(pipe, caller.principal.key_hash, cost)
            reads(pipe)
            results = await pipe.execute()
        except RedisError as exc:
            log.warning("rate limiter unavailable; allowing", extra={"error": repr(exc)})
            return None
        if charge is None:
            return list(results)
        allowed, retry_after = await limiter.settle(charge, results[0])
        self._refuse_unless(allowed, retry_after, budget)
        return list(results[1:])

    async def charge_leased_read(self, caller: Caller) -> None:
        """`charge` one read from the units this process has leased (a round trip only when
        they are used up): for reads answered without Redis."""
        allowed, retry_after = await self.read_lease.take(caller.principal.key_hash)
        self._refuse_unless(allowed, retry_after, "read")

    def _check_cost(self, cost: int, budget: Budget) -> None:
        per_minute = self._per_minute(budget)
        if 0 < per_minute < cost:  # waiting cannot help: permanent, not 429
            raise RpcError("payload_too_large", f"body: {cost} items; the rate limit allows "
                                                f"{per_minute} per minute, send smaller batches")

    def _refuse_unless(self, allowed: bool, retry_after: int, budget: Budget) -> None:
        if not allowed:
            unit = "items" if budget == "write" else "reads"
            raise GatewayError("rate_limited", f"rate limit of {self._per_minute(budget)} "
                               f"{unit} per minute exceeded; retry in {retry_after}s", 429,
                               retry_after=retry_after)

    def push_back(self, caller: Caller, items: int) -> None:
        """429 with Retry-After when the pipeline is behind and this tenant sent at least its
        fair share of the backlog (ingest only)."""
        self.backpressure.check(caller.tenant_id, items)

    def accepted(self, caller: Caller, items: int) -> None:
        """Count what the caller's tenant added to the pipeline, for backpressure's shares."""
        self.backpressure.accepted(caller.tenant_id, items)
