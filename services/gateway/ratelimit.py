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

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class RateLimiter:
    def __init__(self, redis: Redis, per_minute: int, scope: str = ""):
        self._redis = redis
        self._per_minute = per_minute
        self._prefix = f"habitus:rl:{scope}:" if scope else "habitus:rl:"

    async def allow(self, key_id: str, cost: int = 1) -> tuple[bool, int]:
        """Returns (allowed, seconds until the window resets)."""
        if self._per_minute <= 0:
            return True, 0
        now = time.time()
        window = int(now // 60)
        name = f"{self._prefix}{key_id}:{window}"
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.incrby(name, cost)
            pipe.expire(name, 120)
            count, _ = await pipe.execute()
        except RedisError as exc:
            log.warning("rate limiter unavailable; allowing", extra={"error": repr(exc)})
            return True, 0
        retry_after = int(60 - now % 60) + 1
        if int(count) <= self._per_minute:
            return True, retry_after
        # A refused request stores nothing, so it must not use up the window either.
        try:
            await self._redis.decrby(name, cost)
        except RedisError:
            pass
        return False, retry_after
