"""Who is calling and whether their rate limit lets them: what every route but readiness checks
before doing anything.

Rate limits count ingested items, not requests: one batch of 1,000 costs what 1,000 single posts
do, so ingest authenticates first and charges once it knows how many items the batch holds.
"""

from __future__ import annotations

from fastapi import Request

from habitus.bus.rpc import RpcError
from habitus.service.context import ServiceContext
from services.gateway.auth import Caller, KeyCache, authenticate
from services.gateway.errors import GatewayError
from services.gateway.ratelimit import RateLimiter


class Access:
    """The key cache and the rate limiter of one app, and the two checks made with them."""

    def __init__(self, ctx: ServiceContext) -> None:
        settings = ctx.settings
        self.settings = settings
        self.keys = KeyCache(ctx.pool, ttl=settings.key_cache_seconds,
                             last_known=settings.key_last_known_max)
        self.limiter = RateLimiter(ctx.redis, settings.rate_limit_per_minute)

    async def caller_for(self, request: Request, cost: int = 1) -> Caller:
        """The authenticated caller, charged `cost` items of its rate limit."""
        caller = await authenticate(request, self.keys)
        await self.charge(caller, cost)
        return caller

    async def charge(self, caller: Caller, cost: int) -> None:
        """Take `cost` items from the caller's rate limit: 429 with Retry-After when it is used
        up, 413 when `cost` alone exceeds it (waiting cannot help)."""
        settings, limiter = self.settings, self.limiter
        per_minute = settings.rate_limit_per_minute
        if 0 < per_minute < cost:  # waiting cannot help: permanent, not 429
            raise RpcError("payload_too_large", f"body: {cost} items; the rate limit allows "
                                                f"{per_minute} per minute, send smaller batches")
        allowed, retry_after = await limiter.allow(caller.principal.key_hash, cost)
        if not allowed:
            raise GatewayError("rate_limited", f"rate limit of {per_minute} items per minute "
                               f"exceeded; retry in {retry_after}s", 429, retry_after=retry_after)
