"""Where time enters the learning cache: RebuildRequested events.

The scheduler reads the wall clock (the fold never does) and publishes, every
`scheduler_tick_seconds`:

* per user, once no new candidate arrived for `debounce_seconds` (a burst is one rebuild), or,
  for a user whose evidence keeps arriving, once the oldest pending candidate has waited
  `max_wait_seconds`;
* one periodic rebuild every `periodic_seconds` per slot (`periodic`), which the projection
  applies only to the slot's users with new evidence or a threshold crossing due (an index,
  not a scan of every user).

A tick is one query over two partial indexes of dirty users: with nothing pending it reads
nothing. One replica schedules (advisory-lock leader). Event ids derive from what triggered
them, so two replicas, or one restarting, or the next tick while the request is on its way,
publish the same ids and the stream keeps one. While the projection is behind, every tick finds
the same settled users again: a request already published is not published again for
`request_repeat_seconds` (then it is, in case it was lost), so a backlog is not fed four copies a
second of every waiting user's request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from habitus.bus.publisher import EventPublisher
from habitus.db.leader import LeaderLock, LostLeadership
from habitus.events import CATALOG
from habitus.events.domain import RebuildRequested
from habitus.ids import derived_event_id
from habitus.subjects import SLOTS
from habitus.tasks import stop_task
from services.stability_detector import store
from services.stability_detector.periodic import SYSTEM_TENANT, periodic_user
from services.stability_detector.settings import LearningSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TickResult:
    #: settled users found (whether or not their request was published this tick)
    debounced: int
    periodic: bool
    #: requests published this tick (those published recently are left out)
    published: int = 0


class SchedulerResources(Protocol):
    """All the scheduler uses of a running service's resources (a `ServiceContext` has them):
    the database pool (its dirty-user index, its leader lock) and the event publisher."""

    @property
    def pool(self) -> AsyncConnectionPool: ...

    @property
    def publisher(self) -> EventPublisher: ...


class RebuildScheduler:
    def __init__(self, resources: SchedulerResources, settings: LearningSettings,
                 clock: Callable[[], float] = time.time, last_periodic: float | None = None):
        """`resources`: the pool and the publisher (a `ServiceContext`, or anything with both);
        only those two are kept. `last_periodic`: when the last periodic rebuild was requested
        (None: request one at the first tick)."""
        self._pool = resources.pool
        self._publisher = resources.publisher
        self._settings = settings
        self._clock = clock
        self._last_periodic = last_periodic
        self._task: asyncio.Task[None] | None = None
        self._lock = LeaderLock(str(self._pool.conninfo), "learning.scheduler")
        #: request id -> when this scheduler last published it
        self._sent: dict[str, float] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="learning.scheduler")

    async def stop(self) -> None:
        await stop_task(self._task)
        await self._lock.release()

    async def _run(self) -> None:
        while True:
            try:
                if await self._lock.try_acquire():
                    await self._lock.check()
                    await self.tick(self._clock())
            except (LostLeadership, OSError) as exc:
                log.warning("scheduler paused", extra={"error": repr(exc)})
            except Exception:
                log.exception("scheduler tick failed")
            await asyncio.sleep(self._settings.scheduler_tick_seconds)

    async def tick(self, now: float) -> TickResult:
        settings = self._settings
        async with self._pool.connection() as conn, conn.cursor() as cur:
            settled = await store.settled_users(cur, now - settings.debounce_seconds,
                                                now - settings.max_wait_seconds)
        events = [
            CATALOG.new(
                RebuildRequested(as_of=now, scope="user",
                                 reason="new evidence settled" if u.quiet
                                 else "new evidence waited the maximum"),
                tenant_id=u.tenant_id, user_id=u.user_id,
                producer="stability_detector.scheduler", occurred_at=now,
                event_id=_request_id(u),
            )
            for u in settled
        ]
        periodic = (self._last_periodic is None
                    or now - self._last_periodic >= settings.periodic_seconds)
        if periodic:
            bucket = int(now // settings.periodic_seconds)
            events.extend(CATALOG.new(
                RebuildRequested(as_of=now, scope="periodic", reason="periodic"),
                tenant_id=SYSTEM_TENANT, user_id=periodic_user(slot),
                producer="stability_detector.scheduler", occurred_at=now,
                event_id=derived_event_id("periodic", str(bucket), str(slot)),
            ) for slot in range(SLOTS))
        repeat = settings.request_repeat_seconds
        self._sent = {i: at for i, at in self._sent.items() if now - at < repeat}
        events = [e for e in events if e.event_id not in self._sent]
        for event, outcome in zip(events, await self._publisher.publish_many(events),
                                  strict=True):
            if isinstance(outcome, Exception):
                raise outcome
            self._sent[event.event_id] = now
        if periodic:
            self._last_periodic = now
        return TickResult(len(settled), periodic, len(events))


def _request_id(user: store.Settled) -> str:
    """The id of a user's rebuild request: the same for every tick until the projection has
    applied it, a new one for anything new.

    Settled (quiet): the stream sequence of the user's latest candidate, so a new candidate
    (whatever time it claims) means a new request. Waited the maximum (candidates still coming):
    the pending window, i.e. when it opened and the rebuild before it; a new candidate in the
    same window is the same request, so a steady stream gets one rebuild per max wait."""
    if user.quiet:
        return derived_event_id("debounce", user.tenant_id, user.user_id,
                                str(user.last_candidate_seq))
    return derived_event_id("max_wait", user.tenant_id, user.user_id, repr(user.pending_since),
                            repr(user.last_as_of))
