"""Redis as a cache only: never the source of truth.

Every read may miss (flushed, evicted, Redis down) and the caller then computes from Postgres, so
errors are logged and turned into misses instead of failures. Keys are namespaced per tenant and
user, so one user's invalidation never touches another's entries.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from habitus.ids import check_id

log = logging.getLogger(__name__)
PREFIX = "habitus:cache"


def user_key(namespace: str, tenant_id: str, user_id: str, *parts: str) -> str:
    check_id(tenant_id, "tenant_id")
    check_id(user_id, "user_id")
    return ":".join((PREFIX, namespace, tenant_id, user_id, *parts))


class Cache:
    def __init__(self, redis: Redis, namespace: str, default_ttl: float = 3600.0):
        self._redis = redis
        self._ns = namespace
        self._ttl = default_ttl

    def key(self, tenant_id: str, user_id: str, *parts: str) -> str:
        return user_key(self._ns, tenant_id, user_id, *parts)

    async def get_json(self, tenant_id: str, user_id: str, *parts: str) -> Any | None:
        try:
            raw = await self._redis.get(self.key(tenant_id, user_id, *parts))
        except RedisError as exc:
            log.warning("cache read failed; treating as a miss", extra={"error": repr(exc)})
            return None
        return None if raw is None else json.loads(raw)

    async def set_json(self, tenant_id: str, user_id: str, *parts: str, value: Any,
                       ttl: float | None = None) -> bool:
        try:
            await self._redis.set(self.key(tenant_id, user_id, *parts), json.dumps(value),
                                  px=int((ttl or self._ttl) * 1000))
            return True
        except RedisError as exc:
            log.warning("cache write failed", extra={"error": repr(exc)})
            return False

    async def invalidate_user(self, tenant_id: str, user_id: str) -> int:
        """Drop every entry of this user in this namespace."""
        pattern = self.key(tenant_id, user_id, "*")
        removed = 0
        try:
            exact = self.key(tenant_id, user_id)
            removed += int(await self._redis.delete(exact))
            async for key in self._redis.scan_iter(match=pattern, count=500):
                removed += int(await self._redis.delete(key))
        except RedisError as exc:
            log.warning("cache invalidation failed", extra={"error": repr(exc)})
        return removed
