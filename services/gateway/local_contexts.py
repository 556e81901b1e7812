"""`prompt.context` answers kept in the gateway's memory between two changes of their user.

Every agent turn reads its context, and a read served from Redis costs a round trip the read
of an idle system is mostly made of (about a third of a hit, against `/healthz`). Most reads
find what the previous one found: the user's context changes only when their statements are
learned. So the gateway keeps the answers it read, and Redis tells it (client tracking,
services.gateway.context_tracking) every time a key of the context cache changes: a user's
entries hash (their change mark is written there before the change commits, their entries
are dropped and rebuilt there) or the tenant's mark (`TENANT_WIDE`, a tenant-wide change). The
answer is dropped when its user's hash changes, and every answer of the tenant when the
tenant's does. While the tracking connection is down nothing is served from memory.

A read that went to Redis stores what it found only if nothing for its user (or tenant) was
dropped while it was under way, and the tracking connection stayed the same: otherwise the
answer could predate a change whose notice arrived before the answer did. Drops are counted,
and each read holds the count it started at (`ticket`).

Why a local hit is never staler than a Redis hit would be, in practice: the change mark is
written before the change's batch commits, and Redis pushes the key's name to every
gateway from the same event-loop turn as its reply to that write. Anyone who learns of the
change (the command's answer, the event, the next turn) does so through at least three more
hops, so the notice is in this process's socket first, and is applied before any request
read from a later loop turn (context_tracking says why).

What is kept is the response body as sent (rendered once, and about half the memory of the
parsed answer), bounded (`max_entries`, oldest stored first out), per process, and holds
nothing Redis does not: an erasure deletes the user's keys, which drops their answers here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

from habitus.context_cache import owner_of
from habitus.ids import TENANT_WIDE

#: drops remembered per user before they are folded into one floor (bounds the memory)
MAX_DROPS = 100_000


class Ticket(NamedTuple):
    """Where the drops and the tracking connection were when a read started."""

    drops: int
    epoch: int


class Tracking(Protocol):
    """Whether Redis is telling this process about changes, and under which connection
    (services.gateway.context_tracking.TrackingFeed)."""

    live: bool
    epoch: int


class LocalContexts:
    """The answers, by (tenant, user, variant), and the drops that invalidate them."""

    def __init__(self, max_entries: int, tracking: Tracking) -> None:
        self.max_entries = max_entries
        self.tracking = tracking
        self._answers: dict[tuple[str, str, str], bytes] = {}
        #: the variants kept for each user, so a user's drop finds them without a scan (a
        #: tenant-wide drop, rare, scans the users)
        self._by_user: dict[tuple[str, str], set[str]] = {}
        self._drops = 0
        #: the drop count at the user's (tenant's) last drop
        self._dropped_user: dict[tuple[str, str], int] = {}
        self._dropped_tenant: dict[str, int] = {}
        #: every drop forgotten from the two maps above happened at or before this count
        self._floor = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, tenant_id: str, user_id: str, field: str) -> bytes | None:
        """The answer kept for this variant (the response body, as sent), while changes are
        being told."""
        if not self.tracking.live:
            return None
        return self._answers.get((tenant_id, user_id, field))

    def ticket(self) -> Ticket:
        """Hold before reading from Redis; `store` then knows what happened meanwhile."""
        return Ticket(self._drops, self.tracking.epoch)

    def store(self, tenant_id: str, user_id: str, field: str, answer: bytes,
              ticket: Ticket) -> bool:
        """Keep an answer read from Redis after `ticket` was held, unless anything for its
        user or tenant was dropped since or the tracking connection changed."""
        tracking = self.tracking
        if not tracking.live or ticket.epoch != tracking.epoch or self.max_entries <= 0:
            return False
        last = max(self._dropped_user.get((tenant_id, user_id), self._floor),
                   self._dropped_tenant.get(tenant_id, self._floor))
        if last > ticket.drops:
            return False
        key = (tenant_id, user_id, field)
        if key not in self._answers and len(self._answers) >= self.max_entries:
            self._evict(next(iter(self._answers)))
        self._answers[key] = answer
        self._by_user.setdefault((tenant_id, user_id), set()).add(field)
        return True

    def changed(self, keys: Iterable[str]) -> None:
        """Redis says these keys changed: drop the answers they may have made stale."""
        for key in keys:
            owner = owner_of(key)
            if owner is None:
                continue
            self._drops += 1
            tenant_id, user_id = owner
            if user_id == TENANT_WIDE:
                self._dropped_tenant[tenant_id] = self._drops
                for user in [u for t, u in self._by_user if t == tenant_id]:
                    self._drop_user(tenant_id, user)
            else:
                self._dropped_user[(tenant_id, user_id)] = self._drops
                self._drop_user(tenant_id, user_id)
        if len(self._dropped_user) + len(self._dropped_tenant) > MAX_DROPS:
            # forget who, keep when: every read started before now must not store
            self._dropped_user.clear()
            self._dropped_tenant.clear()
            self._floor = self._drops

    def reset(self) -> None:
        """Forget everything: the tracking connection changed, or Redis was flushed."""
        self._drops += 1
        self._floor = self._drops
        self._dropped_user.clear()
        self._dropped_tenant.clear()
        self._answers.clear()
        self._by_user.clear()

    def _drop_user(self, tenant_id: str, user_id: str) -> None:
        for field in self._by_user.pop((tenant_id, user_id), set()):
            del self._answers[(tenant_id, user_id, field)]

    def _evict(self, key: tuple[str, str, str]) -> None:
        tenant_id, user_id, field = key
        del self._answers[key]
        fields = self._by_user[(tenant_id, user_id)]
        fields.discard(field)
        if not fields:
            del self._by_user[(tenant_id, user_id)]
