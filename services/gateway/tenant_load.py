"""Accepted ingest items per tenant in short time buckets: who sent the backlog.

Every gateway replica must judge shares from the same numbers, so the counts live in Redis, one
hash per bucket (`habitus:bp:<bucket>`, tenant -> items), expiring after the history kept. A
request never waits on Redis for them: accepted items are added up in memory and flushed once a
poll (one pipelined round trip per replica per second, whatever the traffic), and the counts are
read back only while the pipeline is over its bound.

Redis is a cache here, never the source of truth: when it cannot be reached, this replica's own
counts (kept in memory over the same history) stand in, so ingest is judged on part of the
picture rather than failed; the unflushed increments are kept and sent once it answers again.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

PREFIX = "habitus:bp:"


class TenantLoad:
    def __init__(self, redis: Redis, *, bucket_seconds: float = 5.0,
                 history_seconds: float = 600.0, prefix: str = PREFIX):
        self._redis = redis
        self.bucket_seconds = bucket_seconds
        self.history_seconds = history_seconds
        self._prefix = prefix
        #: bucket -> tenant -> items, this replica's own (the fallback)
        self._local: defaultdict[int, Counter[str]] = defaultdict(Counter)
        #: bucket -> tenant -> items not yet added to Redis
        self._unflushed: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.redis_ok = True

    def _bucket(self, now: float) -> int:
        return int(now // self.bucket_seconds)

    def _oldest_kept(self, now: float) -> int:
        return self._bucket(now - self.history_seconds)

    def record(self, tenant: str, items: int, now: float) -> None:
        """Count `items` accepted for `tenant` now (in memory; `flush` sends them)."""
        if items <= 0:
            return
        bucket = self._bucket(now)
        self._local[bucket][tenant] += items
        self._unflushed[bucket][tenant] += items

    def _forget_old(self, now: float) -> None:
        oldest = self._oldest_kept(now)
        for table in (self._local, self._unflushed):
            for bucket in [b for b in table if b < oldest]:
                del table[bucket]

    async def flush(self, now: float) -> bool:
        """Add the unflushed counts to Redis; False (kept for the next flush) when it fails."""
        self._forget_old(now)
        if not self._unflushed:
            return True
        ttl = math.ceil(self.history_seconds + 2 * self.bucket_seconds)
        pending, self._unflushed = self._unflushed, defaultdict(Counter)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for bucket, tenants in pending.items():
                key = f"{self._prefix}{bucket}"
                for tenant, n in tenants.items():
                    pipe.hincrby(key, tenant, n)
                pipe.expire(key, ttl)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            for bucket, tenants in pending.items():
                self._unflushed[bucket].update(tenants)
            self._unreachable(exc)
            return False
        self._reachable()
        return True

    async def counts(self, window_seconds: float, now: float) -> dict[str, int]:
        """Accepted items per tenant over the last `window_seconds` (at most the history),
        every replica's from Redis, or this replica's own when Redis cannot be reached."""
        window = min(max(window_seconds, self.bucket_seconds), self.history_seconds)
        buckets = range(self._bucket(now - window), self._bucket(now) + 1)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for bucket in buckets:
                pipe.hgetall(f"{self._prefix}{bucket}")
            answers = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._unreachable(exc)
            return self.local_counts(window, now)
        self._reachable()
        total: Counter[str] = Counter()
        for answer in answers:
            for tenant, n in (answer or {}).items():
                name = tenant.decode() if isinstance(tenant, bytes) else str(tenant)
                total[name] += int(n)
        for bucket, tenants in self._unflushed.items():  # not in Redis yet: still this window's
            if bucket in buckets:
                total.update(tenants)
        return dict(total)

    def local_counts(self, window_seconds: float, now: float) -> dict[str, int]:
        """This replica's own counts over the window (what stands in for Redis's)."""
        first = self._bucket(now - min(window_seconds, self.history_seconds))
        total: Counter[str] = Counter()
        for bucket, tenants in self._local.items():
            if bucket >= first:
                total.update(tenants)
        return dict(total)

    def _unreachable(self, exc: BaseException) -> None:
        if self.redis_ok:
            log.warning("backpressure counts: Redis unreachable; judging shares from this "
                        "gateway's own counts", extra={"error": repr(exc)})
        self.redis_ok = False

    def _reachable(self) -> None:
        if not self.redis_ok:
            log.info("backpressure counts: Redis reachable again")
        self.redis_ok = True
