"""Per-key rate limits in Redis (fixed one-minute windows), counted in ingested items or calls.

One limiter per budget: `scope` keeps the budgets' counters apart (the writes' keys stay
`habitus:rl:<key>:<window>`, as before; reads count under `habitus:rl:read:...`), so spending one
never spends the other.

Redis is a cache here, never the source of truth: when it is unreachable the limiter lets the
request through rather than failing ingest.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

#: a window's counter outlives its minute by one, then goes
_EXPIRY_SECONDS = 120
#: the charge: add to the window's counter and (re)set its expiry, as one step
_CHARGE = ("local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
           "redis.call('EXPIRE', KEYS[1], ARGV[2]) return n")


@dataclass(frozen=True)
class Charge:
    """A charge queued on a pipeline: the window's counter, what was added, when it resets."""

    name: str
    cost: int
    retry_after: int


class RateLimiter:
    def __init__(self, redis: Redis, per_minute: int, scope: str = ""):
        self._redis = redis
        self._per_minute = per_minute
        self._prefix = f"habitus:rl:{scope}:" if scope else "habitus:rl:"

    def queue(self, pipe: Pipeline, key_id: str, cost: int = 1) -> Charge | None:
        """Queue the charge on `pipe` as its next command; None: this budget is unlimited and
        nothing was queued. The caller executes the pipeline and hands that command's result
        to `settle`: a read can ride in the same round trip as its charge.

        One script rather than INCRBY and EXPIRE inside MULTI/EXEC: Redis runs a script
        whole, so the counter still never lives without its expiry, and the pipeline needs no
        transaction around it (four commands and replies become one on every request)."""
        if self._per_minute <= 0:
            return None
        now = time.time()
        name = f"{self._prefix}{key_id}:{int(now // 60)}"
        pipe.eval(_CHARGE, 1, name, cost, _EXPIRY_SECONDS)
        return Charge(name, cost, int(60 - now % 60) + 1)

    async def settle(self, charge: Charge | None, count: Any) -> tuple[bool, int]:
        """(allowed, seconds until the window resets) from the counter's value after the
        charge; a refused charge is taken back."""
        if charge is None:
            return True, 0
        if int(count) <= self._per_minute:
            return True, charge.retry_after
        # A refused request stores nothing, so it must not use up the window either.
        try:
            await self._redis.decrby(charge.name, charge.cost)
        except RedisError:
            pass
        return False, charge.retry_after

    async def allow(self, key_id: str, cost: int = 1) -> tuple[bool, int]:
        """Returns (allowed, seconds until the window resets)."""
        if self._per_minute <= 0:
            return True, 0
        try:
            pipe = self._redis.pipeline(transaction=False)
            charge = self.queue(pipe, key_id, cost)
            [count] = await pipe.execute()
        except RedisError as exc:
            log.warning("rate limiter unavailable; allowing", extra={"error": repr(exc)})
            return True, 0
        return await self.settle(charge, count)
