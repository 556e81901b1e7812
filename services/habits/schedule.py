"""The habits service's background round: expired observations deleted, and one Analyze batch
per user with unread observations in tenants that turned scheduled Analyze on.

One replica works at a time (a leader lock); a round is cheap when there is nothing to do, and
a failing round is logged and tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
import time

from habitus.crypto import Shredded
from habitus.db.leader import LeaderLock, LostLeadership
from habitus.tasks import stop_task
from services.habits import metrics, store
from services.habits.analyze import Analyzer

log = logging.getLogger(__name__)


class Schedule:
    def __init__(self, analyzer: Analyzer, interval: float, *, analyze: bool):
        self._analyzer = analyzer
        self._interval = interval
        self._analyze = analyze
        pool = analyzer.reviewer.pool
        self._pool = pool
        self._lock = LeaderLock(str(pool.conninfo), "habits.schedule")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="habits.schedule")

    async def stop(self) -> None:
        await stop_task(self._task)
        await self._lock.release()

    async def _run(self) -> None:
        while True:
            try:
                if await self._lock.try_acquire():
                    await self._lock.check()
                    await self.round()
            except asyncio.CancelledError:
                raise
            except LostLeadership:
                log.warning("the habits schedule lost its leader lock")
            except Exception:
                log.exception("a habits schedule round failed; trying again later")
            await asyncio.sleep(self._interval)

    async def round(self) -> int:
        """Expire, then analyze: the number of users given a batch."""
        async with self._pool.connection() as conn, conn.cursor() as cur:
            expired = await store.expire_observations(cur, time.time())
            metrics.EXPIRED.inc(expired)
            tenants = await store.scheduled_tenants(cur) if self._analyze else []
        users = 0
        for tenant_id in tenants:
            async with self._pool.connection() as conn, conn.cursor() as cur:
                waiting = await store.users_with_unread(cur, tenant_id)
            for user_id in waiting:
                try:
                    outcome = await self._analyzer.run(tenant_id, user_id, one_batch=True)
                except Shredded:
                    continue  # erased meanwhile: their keys are gone, their rows going
                if outcome.error:
                    log.info("a scheduled Analyze batch failed",
                             extra={"tenant": tenant_id, "error": outcome.error})
                users += 1
        return users
