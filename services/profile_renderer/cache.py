"""The prompt context cache (Redis), per user, invalidated by the events that change it.

Each user has a generation counter. Invalidation bumps it and drops the user's entries; an entry
computed from Postgres is stored only if the generation it started from is still current, so a
slow reader can never put a stale context back after an invalidation. Redis failures are misses.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

_PUT_IF_CURRENT = """
if (redis.call('GET', KEYS[1]) or '0') == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  return 1
end
return 0
"""


def field_for(tools: Iterable[str] | None, budget_chars: int | None) -> str:
    spec = json.dumps([sorted(set(tools)) if tools is not None else None, budget_chars])
    return hashlib.sha1(spec.encode()).hexdigest()


class ContextCache:
    def __init__(self, redis: Redis, ttl_seconds: int = 3600):
        self._redis = redis
        self._ttl = ttl_seconds
        self._put = redis.register_script(_PUT_IF_CURRENT)

    @staticmethod
    def _keys(tenant_id: str, user_id: str) -> tuple[str, str]:
        base = f"habitus:profile:{tenant_id}:{user_id}"
        return f"{base}:gen", f"{base}:ctx"

    async def get(self, tenant_id: str, user_id: str, field: str) -> dict[str, Any] | None:
        try:
            raw = await self._redis.hget(self._keys(tenant_id, user_id)[1], field)
        except RedisError as exc:
            log.warning("context cache read failed", extra={"error": repr(exc)})
            return None
        return None if raw is None else dict(json.loads(raw))

    async def generation(self, tenant_id: str, user_id: str) -> str:
        try:
            raw = await self._redis.get(self._keys(tenant_id, user_id)[0])
        except RedisError:
            return "unavailable"
        return "0" if raw is None else raw.decode()

    async def put(self, tenant_id: str, user_id: str, field: str, value: dict[str, Any],
                  generation: str) -> bool:
        if generation == "unavailable":
            return False
        gen_key, ctx_key = self._keys(tenant_id, user_id)
        try:
            stored = await self._put(keys=[gen_key, ctx_key],
                                     args=[generation, field, json.dumps(value), self._ttl])
        except RedisError as exc:
            log.warning("context cache write failed", extra={"error": repr(exc)})
            return False
        return bool(stored)

    async def invalidate(self, users: Iterable[tuple[str, str]]) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            for tenant_id, user_id in users:
                gen_key, ctx_key = self._keys(tenant_id, user_id)
                pipe.incr(gen_key)
                pipe.delete(ctx_key)
            await pipe.execute()
        except RedisError as exc:
            # Entries already cached stay until their TTL: logged, and bounded by it.
            log.error("context cache invalidation failed", extra={"error": repr(exc)})
