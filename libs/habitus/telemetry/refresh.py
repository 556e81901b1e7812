"""Gauges refreshed from the database on a timer: counts that would be too dear to compute on
every scrape or every batch (a `GROUP BY` over a whole table) are read every `interval`
seconds by one background task, and the scrape reads the last values.

A failed refresh keeps the previous values and is tried again at the next interval: a metric is
never a reason for a service to fail.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool

from habitus.tasks import stop_task

log = logging.getLogger(__name__)

Refresh = Callable[[AsyncCursor[Any]], Awaitable[None]]

#: how often the counts are read again; a dashboard's resolution is the scrape interval (15 s)
DEFAULT_INTERVAL = 15.0


class GaugeRefresher:
    """A service's `Background` task: `refresh(cursor)` now, then every `interval` seconds."""

    def __init__(self, pool: AsyncConnectionPool[Any], refresh: Refresh, *, name: str,
                 interval: float = DEFAULT_INTERVAL) -> None:
        self._pool = pool
        self._refresh = refresh
        self._name = name
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def refresh_once(self) -> bool:
        """One refresh; False (logged) when it failed."""
        try:
            async with self._pool.connection() as conn, conn.cursor() as cur:
                await self._refresh(cur)
            return True
        except Exception as exc:  # a metric never takes the service down
            log.warning("gauge refresh failed", extra={"gauges": self._name,
                                                       "error": repr(exc)})
            return False

    async def _run(self) -> None:
        while True:
            await self.refresh_once()
            await asyncio.sleep(self.interval)

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run(), name=f"gauges:{self._name}")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
