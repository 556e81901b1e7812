"""The gateway's per-key rate limiter on a real Redis: a charge queued with other reads in one
round trip counts as `allow`'s does, a refused one is taken back, and an unreachable Redis lets
requests through (the limiter is a cache, never the source of truth)."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from habitus.runtime.embedded import free_port
from services.gateway.ratelimit import RateLimiter
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio


async def test_a_charge_sent_with_reads_counts_and_a_refused_one_is_taken_back(
        servers: ServerUrls) -> None:
    redis = Redis.from_url(servers.redis)
    try:
        limiter = RateLimiter(redis, per_minute=5, scope="read")
        key = unique("key")
        await redis.set(f"probe:{key}", b"value")
        if time.time() % 60 > 58:  # one-minute windows: do not straddle one
            await asyncio.sleep(60 - time.time() % 60)
        outcomes = []
        for cost in (2, 2, 2, 1):
            pipe = redis.pipeline(transaction=False)
            charge = limiter.queue(pipe, key, cost)
            pipe.get(f"probe:{key}")
            count, probe = await pipe.execute()
            assert probe == b"value"  # the read rode in the same round trip
            outcomes.append((await limiter.settle(charge, count))[0])
        # 2 + 2 fit, the third 2 would make 6: refused and taken back, so 1 more still fits.
        assert outcomes == [True, True, False, True]
        assert charge is not None
        assert int(await redis.get(charge.name) or 0) == 5
        assert 0 < await redis.ttl(charge.name) <= 120
        assert charge.name.startswith("habitus:rl:read:")
        allowed, retry_after = await limiter.allow(key)
        assert not allowed and 1 <= retry_after <= 61
    finally:
        await redis.aclose()


async def test_unlimited_queues_nothing_and_an_unreachable_redis_lets_through() -> None:
    gone = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    try:
        assert RateLimiter(gone, per_minute=0).queue(gone.pipeline(), "k") is None
        assert await RateLimiter(gone, per_minute=0).allow("k") == (True, 0)
        assert await RateLimiter(gone, per_minute=1).allow("k", 1) == (True, 0)
    finally:
        await gone.aclose()
