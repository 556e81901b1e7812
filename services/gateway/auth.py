"""Who is calling: API key → tenant, with a short cache so a hot key costs no query.

Revocation takes effect within the positive cache TTL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import Request
from psycopg_pool import AsyncConnectionPool

from habitus.auth import keys
from habitus.auth.keys import Principal
from habitus.bus.rpc import RpcError
from habitus.ids import check_id

TENANT_HEADER = "x-habitus-tenant"


@dataclass(frozen=True, slots=True)
class Caller:
    tenant_id: str
    principal: Principal


class KeyCache:
    def __init__(self, pool: AsyncConnectionPool, ttl: float = 30.0, negative_ttl: float = 5.0):
        self._pool = pool
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._entries: dict[str, tuple[float, Principal | None]] = {}

    async def lookup(self, key: str) -> Principal | None:
        digest = keys.hash_key(key)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        principal = await keys.lookup(self._pool, key)
        ttl = self._ttl if principal else self._negative_ttl
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[digest] = (now + ttl, principal)
        return principal


def presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return request.headers.get("x-api-key") or None


async def authenticate(request: Request, cache: KeyCache) -> Caller:
    key = presented_key(request)
    if not key:
        raise RpcError("unauthenticated", "send the API key as 'Authorization: Bearer <key>'")
    principal = await cache.lookup(key)
    if principal is None:
        raise RpcError("unauthenticated", "unknown or revoked API key")
    named = request.headers.get(TENANT_HEADER)
    if principal.is_admin:
        if not named:
            raise RpcError("invalid_argument",
                           "X-Habitus-Tenant: an admin key must name the tenant it acts for")
        try:
            return Caller(check_id(named, "X-Habitus-Tenant"), principal)
        except ValueError as exc:
            raise RpcError("invalid_argument", str(exc)) from exc
    if named and named != principal.tenant_id:
        raise RpcError("permission_denied", "this key cannot act for another tenant")
    return Caller(principal.tenant_id, principal)
