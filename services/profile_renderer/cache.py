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
and a put that finds it living less than an entry's TTL stretches it to twice that, so it
outlives every entry it may turn away and is written about once a TTL, not once a second: each
write of the tenant's hash drops every answer of the tenant that the gateways keep in memory
(services.gateway.local_contexts).

A mark written for a batch that then rolls back only costs misses until the batch is applied
again. After a commit the user's entries are also dropped (a generation keeps a slow reader
from putting a superseded entry back), which frees memory, and the entries read lately are
built again (services.profile_renderer.contexts), so the next read hits. Generations come from
one counter for all users and a missing one matches no put: an erasure deletes the user's
generation, and a put read before it (a miss, a rebuild) finds nothing current afterwards,
where a per-user counter would have started again at a value the put could hold.
Redis failures are misses; if a mark cannot be written, entries cached before it can be served
until their TTL (logged).

The key layout and the read are the library's (habitus.context_cache), since the gateway serves
hits too; everything that writes is here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
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
    read_credits,
    read_key,
    stamped,
    tenant_mark_key,
    usable,
)
from habitus.ids import TENANT_WIDE

log = logging.getLogger(__name__)

__all__ = ["MARK_FIELD", "STAMP", "ContextCache", "Lookup", "Stamp", "field_for", "usable"]

# KEYS: the generation, the user's hash, the tenant's hash (its mark), the user's asked-for
# variants, the user's read marks; ARGV: the generation read before the inputs, the field, the
# value, the TTL, the variant as asked for ("": not recorded), how long that record lasts, the
# rebuilds the entry's read mark has left (none left: no mark, the entry is built ahead of no
# read).
_PUT_IF_CURRENT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[5] ~= '' then
    redis.call('HSET', KEYS[4], ARGV[2], ARGV[5])
    redis.call('EXPIRE', KEYS[4], ARGV[6])
  end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  if tonumber(ARGV[7]) > 0 then
    redis.call('HSET', KEYS[5], ARGV[2], ARGV[7])
    redis.call('EXPIRE', KEYS[5], ARGV[4])
  end
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  local left = redis.call('TTL', KEYS[3])
  if left >= 0 and left < tonumber(ARGV[4]) then
    redis.call('EXPIRE', KEYS[3], 2 * tonumber(ARGV[4]))
  end
  return 1
end
return 0
"""

# Generations are drawn from one counter for all users (KEYS[2]), so no value is ever handed out
# twice: erasing a user deletes their generation, and a put holding one read before the erasure
# must never find it current again (a per-user counter started again at 1). A missing generation
# matches no put. KEYS: the user's generation, the counter; ARGV: the TTL.
_CURRENT_GENERATION = """
local current = redis.call('GET', KEYS[1])
if not current then
  current = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], current, 'EX', ARGV[1])
end
return current
"""
_NEXT_GENERATION = """
local next = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], next, 'EX', ARGV[1])
return next
"""
#: the counter every user's generations are drawn from (it names no user)
GENERATIONS = "habitus:profile:generations"

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
class Entry:
    """One entry for `ContextCache.put_many`, as `put` takes it."""

    field: str
    value: dict[str, Any]
    stamp: Stamp
    wanted: str | None = None
    credits: int = 0


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


def wanted_key(tenant_id: str, user_id: str) -> str:
    """The hash of the user's variants a miss asked for (field -> `Variant.recorded`), which
    the projection builds again after the user's changes (services.profile_renderer.contexts).
    Kept apart from the entries: an invalidation drops those, and this says what to rebuild."""
    return f"habitus:profile:{tenant_id}:{user_id}:wanted"


class ContextCache:
    def __init__(self, redis: Redis, ttl_seconds: int = 3600, wanted_seconds: int = 600):
        self._redis = redis
        self._ttl = ttl_seconds
        #: how long a variant asked for is rebuilt after changes without being asked again
        self.wanted_seconds = wanted_seconds
        self._put = redis.register_script(_PUT_IF_CURRENT)
        self._mark = redis.register_script(_MARK)

    _keys = staticmethod(context_keys)
    _tenant_mark_key = staticmethod(tenant_mark_key)

    async def get(self, tenant_id: str, user_id: str, field: str) -> dict[str, Any] | None:
        return await read_context(self._redis, tenant_id, user_id, field)

    async def generation(self, tenant_id: str, user_id: str) -> str:
        """The user's current generation (one drawn now if they have none), which a value
        built from inputs read after this must be put under."""
        try:
            raw = await self._redis.eval(_CURRENT_GENERATION, 2, self._keys(tenant_id, user_id)[0],
                                         GENERATIONS, self._ttl)
        except RedisError:
            return "unavailable"
        return _generation(raw)

    async def lookup(self, tenant_id: str, user_id: str, field: str) -> Lookup:
        """`get` and `generation` in one round trip (under load each round trip waits for a
        core; a miss made two before it read anything else), and the marks seen with them."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_read(pipe, tenant_id, user_id, field)
            pipe.eval(_CURRENT_GENERATION, 2, self._keys(tenant_id, user_id)[0], GENERATIONS,
                      self._ttl)
            entry_and_mark, tenant_mark, generation = await pipe.execute()
        except RedisError as exc:
            log.warning("context cache read failed", extra={"error": repr(exc)})
            return Lookup(None, "unavailable", Stamp(0, 0))
        hit, floor = judge(entry_and_mark, tenant_mark)
        return Lookup(hit, _generation(generation), floor)

    async def put(self, tenant_id: str, user_id: str, field: str, value: dict[str, Any],
                  generation: str, stamp: Stamp, wanted: str | None = None,
                  credits: int = 0) -> bool:
        """Store `value`, computed from inputs read at checkpoints `stamp`. `wanted`: the
        variant as asked for (`Variant.recorded`), recorded with the value so that a rebuild
        knows what to build (not when the put is turned away: a rebuild that lost the race to
        an erasure must not write the user's keys back); `credits`: how many more times the
        user's changes build the entry again before a read must (`READ_CREDITS` for the
        miss that built it, one less than it had for a rebuild ahead; 0: none)."""
        if generation == "unavailable":
            return False
        try:
            stored = await self._put(keys=self._put_keys(tenant_id, user_id), args=self._put_args(
                generation, Entry(field, value, stamp, wanted, credits)))
        except RedisError as exc:
            log.warning("context cache write failed", extra={"error": repr(exc)})
            return False
        return bool(stored)

    def _put_keys(self, tenant_id: str, user_id: str) -> list[str]:
        """`_PUT_IF_CURRENT`'s KEYS for one user."""
        gen_key, ctx_key = self._keys(tenant_id, user_id)
        return [gen_key, ctx_key, self._tenant_mark_key(tenant_id), wanted_key(tenant_id, user_id),
                read_key(tenant_id, user_id)]

    def _put_args(self, generation: str, entry: Entry) -> list[Any]:
        """`_PUT_IF_CURRENT`'s ARGV for one entry."""
        return [generation, entry.field, stamped(entry.value, entry.stamp), self._ttl,
                entry.wanted or "", self.wanted_seconds, entry.credits]

    async def put_many(self, tenant_id: str, user_id: str, generation: str,
                       entries: Sequence[Entry]) -> list[bool]:
        """`put` for several entries of one user, in one transaction: a reader sees all of
        them or none (a rebuild puts every variant a change dropped)."""
        if generation == "unavailable" or not entries:
            return [False] * len(entries)
        keys = self._put_keys(tenant_id, user_id)
        try:
            pipe = self._redis.pipeline(transaction=True)
            for entry in entries:
                pipe.eval(_PUT_IF_CURRENT, len(keys), *keys, *self._put_args(generation, entry))
            stored = await pipe.execute()
        except RedisError as exc:
            log.warning("context cache write failed", extra={"error": repr(exc)})
            return [False] * len(entries)
        return [bool(x) for x in stored]

    async def wanted(self, users: Iterable[tuple[str, str]]
                     ) -> dict[tuple[str, str], tuple[str, list[bytes]]]:
        """The users with variants asked for: their generation (read with the variants, before
        any input is read) and what each variant's record says. One round trip for all."""
        users = list(users)
        if not users:
            return {}
        # one transaction: an erasure between the two reads would pair a user's variants with
        # no generation (which no put matches anyway) or the reverse
        pipe = self._redis.pipeline(transaction=True)
        for tenant_id, user_id in users:
            pipe.hvals(wanted_key(tenant_id, user_id))
            pipe.get(self._keys(tenant_id, user_id)[0])
        results = await pipe.execute()
        return {user: (_generation(generation), list(recorded))
                for user, recorded, generation in zip(users, results[::2], results[1::2],
                                                      strict=True) if recorded}

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

    async def invalidate(self, users: Iterable[tuple[str, str]]
                         ) -> dict[tuple[str, str], dict[str, int]]:
        """After a commit: drop the users' entries and marks (what is cached from now on was
        read after the commit; the generation turns away a put that started before it), and
        say which entries have rebuilds left (what to build again) and how many. The
        tenant's mark (`TENANT_WIDE`) is kept: the other users' entries are not dropped, and
        it is what turns them away."""
        users = [u for u in users if u[1] != TENANT_WIDE]
        if not users:
            return {}
        try:
            # one transaction: no read can be marked between the listing and the drop. The
            # read marks go with the entries: what a rebuild does not renew, it has spent
            pipe = self._redis.pipeline(transaction=True)
            for tenant_id, user_id in users:
                gen_key, ctx_key = self._keys(tenant_id, user_id)
                pipe.hgetall(read_key(tenant_id, user_id))
                pipe.eval(_NEXT_GENERATION, 2, gen_key, GENERATIONS, self._ttl)
                pipe.delete(ctx_key, read_key(tenant_id, user_id))
            results = await pipe.execute()
        except RedisError as exc:
            # The marks still turn earlier entries away; they expire with their TTL.
            log.error("context cache invalidation failed", extra={"error": repr(exc)})
            return {}
        read = {user: read_credits(marks) for user, marks in zip(users, results[::3],
                                                                   strict=True)}
        return {user: fields for user, fields in read.items() if fields}

    async def forget(self, users: Iterable[tuple[str, str]]) -> None:
        """An erased user's keys, generation and change mark included: nothing is left under
        the user's name (a failure is raised, so the erasure is retried, not reported done)."""
        pipe = self._redis.pipeline(transaction=False)
        for tenant_id, user_id in users:
            pipe.delete(*self._keys(tenant_id, user_id), wanted_key(tenant_id, user_id),
                        read_key(tenant_id, user_id))
        await pipe.execute()
