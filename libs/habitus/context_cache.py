"""The prompt context cache's layout and its read: what the profile renderer writes and any
reader may serve.

The profile renderer owns the cache (services.profile_renderer.cache: entries, change marks,
generations, invalidation, erasure). Reading it is shared because the hot path is shorter
without the renderer: the gateway answers `prompt.context` cache hits from Redis itself, so an
agent's read never waits behind the renderer's projection work (a batch being applied holds
that process's event loop for milliseconds at a time under load). Both queue the same reads
(`queue_read`, on a pipeline that also carries the gateway's read-budget charge or the
renderer's generation), judge them with `judge` and answer with `answer`, so an entry is served
by the same rule, and as the same bytes, wherever it is read.

Each user's entries live in one hash, each stamped with where `profile.render` was when its
inputs were read: the checkpoint of the partition holding the user (`_seq`) and of the one
holding the tenant's tenant-wide changes (`_tseq`; the same partition when the projection is
not split). The user's hash's `_min` field is the sequence of the user's last change (marked
before the batch applying it commits), and the tenant's hash (`TENANT_WIDE`) holds the tenant's
last tenant-wide change. An entry counts only if each stamp is at least its mark (the user's
stamp the user's mark, the tenant's stamp the tenant's), so the moment a change commits no
earlier entry is served by any reader; the two partitions' sequences are never compared with
each other, so one partition running ahead of the other can neither pass off an entry built
before a change nor keep a current one from being served.

Reading an entry also marks it read (in the same script as the read, in the user's read marks,
`read_key`): the renderer builds again, after the user's next changes, the entries read lately,
so an agent reading its user's context on every turn finds it built
(services.profile_renderer.contexts). The read marks are kept under a prefix of their own,
outside `PREFIX`: the gateways keeping answers in memory drop a user's on every write under
`PREFIX` (services.gateway.local_contexts), and a read that wrote its mark there dropped the
answer it had just kept, so the next read after every change went to Redis too.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.exceptions import RedisError

from habitus.ids import TENANT_WIDE

log = logging.getLogger(__name__)

MARK_FIELD = "_min"
STAMP = "_seq"
TENANT_STAMP = "_tseq"
#: the rebuilds an entry read now is worth: how many more times the entry is built again after
#: the user's changes before a read must ask for it again. A read (a hit, or the miss that
#: built it) sets its read mark (`read_key`) to `READ_CREDITS`; each rebuild ahead of a read
#: spends one. So building ahead costs at most `READ_CREDITS` builds a read, and a user whose
#: turns change their context a few times between two reads of it still finds it built.
READ_CREDITS = 3

# KEYS: the user's entries, the user's read marks; ARGV: the field, the change mark's field
# (`MARK_FIELD`), the credits. The entry and the user's change mark, as HMGET gives them; a
# present entry is marked read, and the read marks live as long as the entries they are about
# (a hash that exists has its TTL). A read mark already at its value is not written again.
# Read marks left in the entries hash by an earlier release are never read, and go with it.
_READ_ENTRY = """
local found = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2])
if found[1] and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
return found
"""


class Stamp(NamedTuple):
    """Where the partitions a user's context is built from were: the user's, the tenant's.
    Also a floor: the change marks (the user's, the tenant's) a value must reach."""

    user: int
    tenant: int

    def reaches(self, floor: Stamp) -> bool:
        return self.user >= floor.user and self.tenant >= floor.tenant


#: every key of the context cache starts so (entries, change marks, generations, variants asked
#: for), but the read marks (`READ_PREFIX`)
PREFIX = "habitus:profile:"
_ENTRIES_SUFFIX = ":ctx"


def context_keys(tenant_id: str, user_id: str) -> tuple[str, str]:
    """The user's generation counter and the hash of their cached contexts."""
    base = f"{PREFIX}{tenant_id}:{user_id}"
    return f"{base}:gen", f"{base}{_ENTRIES_SUFFIX}"


def owner_of(key: str) -> tuple[str, str] | None:
    """(tenant, user) whose entries hash `key` is (`TENANT_WIDE`: the tenant's mark); None
    for every other key. Tenant and user ids hold no colon (habitus.ids), so the split is
    exact."""
    if not key.startswith(PREFIX) or not key.endswith(_ENTRIES_SUFFIX):
        return None
    parts = key[len(PREFIX):-len(_ENTRIES_SUFFIX)].split(":")
    return (parts[0], parts[1]) if len(parts) == 2 else None


#: the users' read marks (`read_key`): outside `PREFIX`, so no gateway drops an answer for them
READ_PREFIX = "habitus:profile-read:"


def read_key(tenant_id: str, user_id: str) -> str:
    """The hash of the user's read marks: entry field -> rebuilds left (`READ_CREDITS`)."""
    return f"{READ_PREFIX}{tenant_id}:{user_id}"


def tenant_mark_key(tenant_id: str) -> str:
    """The hash whose `_min` is the tenant's last tenant-wide change."""
    return context_keys(tenant_id, TENANT_WIDE)[1]


def field_for(tools: Iterable[str] | None, budget_chars: int | None,
              unconfirmed: bool = False) -> str:
    """The entry of one variant of the user's context: every request option that changes the
    text is part of it, so a context with the unconfirmed section is never served for one
    asked without it (or the reverse)."""
    spec = json.dumps([sorted(set(tools)) if tools is not None else None, budget_chars,
                       unconfirmed])
    return hashlib.sha1(spec.encode()).hexdigest()


def usable(raw: bytes | None, user_mark: bytes | None, tenant_mark: bytes | None
           ) -> dict[str, Any] | None:
    """The cached value, if its user stamp is at or after the user's last change and its
    tenant stamp at or after the tenant's last tenant-wide change (an entry written with one
    stamp, before they were two, has it for both)."""
    if raw is None:
        return None
    entry = dict(json.loads(raw))
    stamp = entry.pop(STAMP, None)
    tenant_stamp = entry.pop(TENANT_STAMP, stamp)
    if not isinstance(stamp, int) or not isinstance(tenant_stamp, int):
        return None
    if not Stamp(stamp, tenant_stamp).reaches(floor_of(user_mark, tenant_mark)):
        return None
    return entry


def floor_of(user_mark: bytes | None, tenant_mark: bytes | None) -> Stamp:
    return Stamp(int(user_mark or 0), int(tenant_mark or 0))


def stamped(value: dict[str, Any], stamp: Stamp) -> str:
    """The cached form of `value` built at `stamp`."""
    return json.dumps({**value, STAMP: stamp.user, TENANT_STAMP: stamp.tenant})


def queue_read(pipe: Any, tenant_id: str, user_id: str, field: str) -> None:
    """Add the reads `judge` needs to a pipeline: the entry with the user's mark (the entry,
    when present, marked read), then the tenant's mark. The renderer queues its generation
    after them, in the same round trip."""
    pipe.eval(_READ_ENTRY, 2, context_keys(tenant_id, user_id)[1], read_key(tenant_id, user_id),
              field, MARK_FIELD, READ_CREDITS)
    pipe.hget(tenant_mark_key(tenant_id), MARK_FIELD)


def read_credits(marks: Mapping[bytes | str, bytes | str]) -> dict[str, int]:
    """The entries marked read and the rebuilds each has left, from a user's read marks
    (`read_key`, as HGETALL gives them); what is not a positive count is left out."""
    out: dict[str, int] = {}
    for name, value in marks.items():
        try:
            credits = int(value)
        except ValueError:
            continue
        if credits > 0:
            out[name.decode() if isinstance(name, bytes) else name] = credits
    return out


def judge(entry_and_mark: Sequence[bytes | None], tenant_mark: bytes | None
          ) -> tuple[dict[str, Any] | None, Stamp]:
    """The entry if it is current, and the change marks seen (the floor a value built now must
    reach to be current), from the two results `queue_read` asked for."""
    raw, mark = entry_and_mark
    return usable(raw, mark, tenant_mark), floor_of(mark, tenant_mark)


async def read_context(redis: Redis, tenant_id: str, user_id: str, field: str
                       ) -> dict[str, Any] | None:
    """The user's cached context variant `field` if it is still current, in one pipelined
    round trip (the entry, the user's mark, the tenant's mark). A Redis failure is a miss:
    the cache is never the source of truth."""
    try:
        pipe = redis.pipeline(transaction=False)
        queue_read(pipe, tenant_id, user_id, field)
        entry_and_mark, tenant_mark = await pipe.execute()
    except RedisError as exc:
        log.warning("context cache read failed", extra={"error": repr(exc)})
        return None
    return judge(entry_and_mark, tenant_mark)[0]


def answer(context: dict[str, Any]) -> dict[str, Any]:
    """`prompt.context`'s result for a context without a habits section (no `request`)."""
    return {"steered_by": [], **context}
