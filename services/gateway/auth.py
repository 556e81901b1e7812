"""Who is calling: API key → tenant and role, with a short cache so a hot key costs no query.

Revocation is announced on the bus (habitus.auth.revocation) and takes effect on hearing it;
a gateway that missed it refuses the key within the fresh cache's TTL. Ingest needs only NATS,
so a Postgres outage must not stop agents whose keys are known: a key the database confirmed
before is remembered (bounded, least recently used dropped first) and served while the
database cannot be reached. The consequence: a key revoked during the outage keeps working
until the database answers again, unless the revocation was heard. An unknown key during the
outage is 503 (we cannot tell), never 401.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import psycopg
from cachetools import LRUCache, TTLCache
from fastapi import Request
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from habitus.auth import keys
from habitus.auth.keys import Principal
from habitus.bus.rpc import RpcError
from habitus.ids import check_id

log = logging.getLogger(__name__)

TENANT_HEADER = "x-habitus-tenant"
#: The database is unreachable (not: the key is wrong).
DB_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, TimeoutError)


@dataclass(frozen=True, slots=True)
class Caller:
    tenant_id: str
    principal: Principal


class KeyCache:
    def __init__(self, pool: AsyncConnectionPool, ttl: float = 30.0, negative_ttl: float = 5.0,
                 last_known: int = 10_000, lookup_timeout: float = 2.0,
                 max_entries: int = 10_000):
        self._pool = pool
        self._lookup_timeout = lookup_timeout
        self._fresh: TTLCache[str, Principal] | None = (
            TTLCache(max_entries, ttl) if ttl > 0 else None)
        self._unknown: TTLCache[str, bool] | None = (
            TTLCache(max_entries, min(negative_ttl, ttl)) if ttl > 0 and negative_ttl > 0
            else None)
        self._last_known: LRUCache[str, Principal] | None = (
            LRUCache(last_known) if last_known > 0 else None)
        #: keys announced revoked, remembered as long as a stale answer could still arrive
        #: (a lookup that read the table before the revocation committed)
        self._revoked: TTLCache[str, bool] = TTLCache(max_entries, max(ttl, lookup_timeout, 1.0))

    def forget(self, key_hash: str) -> None:
        """The key was revoked: refuse it from now on, whatever the caches hold."""
        self._revoked[key_hash] = True
        for cache in (self._fresh, self._last_known):
            if cache is not None:
                cache.pop(key_hash, None)

    async def lookup(self, key: str) -> Principal | None:
        digest = keys.hash_key(key)
        if digest in self._revoked:
            return None
        if self._fresh is not None:
            try:  # one read: a check, then a read, can straddle the entry's expiry
                return self._fresh[digest]
            except KeyError:
                pass
        if self._unknown is not None and digest in self._unknown:
            return None
        try:
            principal = await asyncio.wait_for(keys.lookup(self._pool, key),
                                               self._lookup_timeout)
        except DB_UNAVAILABLE as exc:
            known = self._last_known.get(digest) if self._last_known is not None else None
            if known is not None:
                log.warning("key store unreachable; serving a last-known key",
                            extra={"key_prefix": known.key_prefix, "error": repr(exc)})
                return known
            raise RpcError("unavailable", "the key store cannot be reached to check this key; "
                                          "retry later") from exc
        if principal is None or digest in self._revoked:
            if self._unknown is not None:
                self._unknown[digest] = True
            if self._last_known is not None:
                self._last_known.pop(digest, None)  # revoked: forget it for outages too
            return None
        if self._fresh is not None:
            self._fresh[digest] = principal
        if self._last_known is not None:
            self._last_known[digest] = principal
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
