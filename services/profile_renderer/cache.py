"""The prompt context cache (Redis), per user, never staler than the last committed change.

Each user's entries live in one hash, each stamped with the `profile.render` checkpoint that was
current when its inputs were read (the checkpoint is read first, so a stamp is never newer than
the data under it). The projection marks a user as changed at an event's sequence *before* the
batch that applies it commits (`mark_changed`, field `_min`); a hit counts only if its stamp is
at least that mark. So the moment a change commits, no earlier entry can be served, without
waiting for any after-commit clean-up: a command that waited for the checkpoint can answer, and
the caller's next `prompt.context` shows the change.

A user's context also holds the tenant's rules (those of the reserved user `TENANT_WIDE`). Their
changes mark `(tenant, TENANT_WIDE)`, and a hit counts only if its stamp is at least both the
user's mark and the tenant's (read with the entry in one pipelined round trip): one tenant-wide
change turns away every user's earlier entries at once, without listing the users. The tenant's
mark is never dropped after a commit (no entry of that tenant could be checked against it then),
and every put stretches its TTL to the entry's, so it outlives every entry it may turn away.

A mark written for a batch that then rolls back only costs misses until the batch is applied
again. After a commit the user's entries are also dropped (a generation counter keeps a slow
reader from putting a superseded entry back), which frees memory. Redis failures are misses;
if a mark cannot be written, entries cached before it can be served until their TTL (logged).

The key layout and the read are the library's (habitus.context_cache), since the gateway serves
hits too; everything that writes is here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from habitus.context_cache import (
    MARK_FIELD,
    STAMP,
    Stamp,
    context_keys,
    field_for,
    judge,
    queue_read,
    read_context,
    stamped,
    tenant_mark_key,
    usable,
)
from habitus.ids import TENANT_WIDE

log = logging.getLogger(__name__)

__all__ = ["MARK_FIELD", "STAMP", "ContextCache", "Lookup", "Stamp", "field_for", "usable"]

# KEYS: the generation, the user's hash, the tenant's hash (its mark); ARGV: the generation
# read before the inputs, the field, the value, the TTL.
_PUT_IF_CURRENT = """
if (redis.call('GET', KEYS[1]) or '0') == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  local left = redis.call('TTL', KEYS[3])
  if left >= 0 and left < tonumber(ARGV[4]) then
    redis.call('EXPIRE', KEYS[3], ARGV[4])
  end
  return 1
end
return 0
"""

# KEYS: the users' hashes; ARGV: one sequence per key, then the TTL. The mark only grows.
_MARK = """
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  local seq = tonumber(ARGV[i])
  local current = tonumber(redis.call('HGET', key, '_min') or '0')
  if seq > current then
    redis.call('HSET', key, '_min', seq)
  end
  redis.call('EXPIRE', key, ttl)
end
return #KEYS
"""


@dataclass(frozen=True, slots=True)
class Lookup:
    """What one read of the cache saw."""

    #: the entry, if it is current
    hit: dict[str, Any] | None
    #: the generation a freshly built entry must be put under (read before the inputs);
    #: "unavailable" when Redis did not answer (nothing can be put, nothing is known)
    generation: str
    #: the change marks seen (the user's, the tenant's): a value built from inputs at
    #: earlier checkpoints is not current for this reader
    floor: Stamp


def _generation(raw: bytes | str | None) -> str:
    if raw is None:
        return "0"
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class ContextCache:
    def __init__(self, redis: Redis, ttl_seconds: int = 3600):
        self._redis = redis
        self._ttl = ttl_seconds
        self._put = redis.register_script(_PUT_IF_CURRENT)
        self._mark = redis.register_script(_MARK)

    _keys = staticmethod(context_keys)
    _tenant_mark_key = staticmethod(tenant_mark_key)

    async def get(self, tenant_id: str, user_id: str, field: str) -> dict[str, Any] | None:
        return await read_context(self._redis, tenant_id, user_id, field)

    async def generation(self, tenant_id: str, user_id: str) -> str:
        try:
            raw = await self._redis.get(self._keys(tenant_id, user_id)[0])
        except RedisError:
            return "unavailable"
        return _generation(raw)

    async def lookup(self, tenant_id: str, user_id: str, field: str) -> Lookup:
        """`get` and `generation` in one round trip (under load each round trip waits for a
        core; a miss made two before it read anything else), and the marks seen with them."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_read(pipe, tenant_id, user_id, field)
            pipe.get(self._keys(tenant_id, user_id)[0])
            entry_and_mark, tenant_mark, generation = await pipe.execute()
        except RedisError as exc:
            log.warning("context cache read failed", extra={"error": repr(exc)})
            return Lookup(None, "unavailable", Stamp(0, 0))
        hit, floor = judge(entry_and_mark, tenant_mark)
        return Lookup(hit, _generation(generation), floor)

    async def put(self, tenant_id: str, user_id: str, field: str, value: dict[str, Any],
                  generation: str, stamp: Stamp) -> bool:
        """Store `value`, computed from inputs read at checkpoints `stamp`."""
        if generation == "unavailable":
            return False
        gen_key, ctx_key = self._keys(tenant_id, user_id)
        try:
            stored = await self._put(keys=[gen_key, ctx_key, self._tenant_mark_key(tenant_id)],
                                     args=[generation, field, stamped(value, stamp),
                                           self._ttl])
        except RedisError as exc:
            log.warning("context cache write failed", extra={"error": repr(exc)})
            return False
        return bool(stored)

    async def mark_changed(self, changes: Mapping[tuple[str, str], int]) -> None:
        """Before a batch commits: these users' contexts change at these sequences
        (`(tenant, TENANT_WIDE)`: every user's of the tenant)."""
        if not changes:
            return
        users = sorted(changes)
        try:
            await self._mark(keys=[self._keys(t, u)[1] for t, u in users],
                             args=[*(changes[user] for user in users), self._ttl])
        except RedisError as exc:
            log.error("context cache mark failed; cached contexts may be served until their "
                      "TTL", extra={"error": repr(exc)})

    async def invalidate(self, users: Iterable[tuple[str, str]]) -> None:
        """After a commit: drop the users' entries and marks (what is cached from now on was
        read after the commit; the generation turns away a put that started before it).
        The tenant's mark (`TENANT_WIDE`) is kept: the other users' entries are not dropped,
        and it is what turns them away."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            for tenant_id, user_id in users:
                if user_id == TENANT_WIDE:
                    continue
                gen_key, ctx_key = self._keys(tenant_id, user_id)
                pipe.incr(gen_key)
                pipe.delete(ctx_key)
            await pipe.execute()
        except RedisError as exc:
            # The marks still turn earlier entries away; they expire with their TTL.
            log.error("context cache invalidation failed", extra={"error": repr(exc)})

    async def forget(self, users: Iterable[tuple[str, str]]) -> None:
        """An erased user's keys, generation and change mark included: nothing is left under
        the user's name (a failure is raised, so the erasure is retried, not reported done)."""
        pipe = self._redis.pipeline(transaction=False)
        for tenant_id, user_id in users:
            pipe.delete(*self._keys(tenant_id, user_id))
        await pipe.execute()
