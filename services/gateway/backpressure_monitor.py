"""The gateway's backpressure at run time: a background poll of the pipeline's lag and of who
sent the backlog, and the check ingest makes against the last poll.

The poll, about once a second (HABITUS_BACKPRESSURE_POLL_SECONDS), measures the lag from
JetStream (`services.gateway.pipeline_lag`), flushes this replica's accepted-item counts to
Redis, and, only while the lag is over the bound, reads everybody's counts over the lag window
(`services.gateway.tenant_load`). A request's check is then arithmetic on that snapshot
(`services.gateway.backpressure.decide`): ingest never waits on a measurement.

When the lag cannot be measured (the bus does not answer in time) ingest is let through: an
unknown lag is not a reason to refuse, and if the bus is really down, publishing answers the
usual 503. The failure is logged once per outage and counted
(`habitus_gateway_lag_measurement_failures_total`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from habitus.config import Settings
from habitus.tasks import stop_task
from services.gateway import metrics
from services.gateway.backpressure import PipelineLag, decide, over_bound
from services.gateway.errors import GatewayError
from services.gateway.pipeline_lag import Watched, pipeline_lag, watched_projections
from services.gateway.tenant_load import TenantLoad

log = logging.getLogger(__name__)

#: how far back the per-tenant counts reach: a lag longer than this is judged on its most
#: recent ten minutes of intake (who is sending now is who the 429 can slow)
HISTORY_SECONDS = 600.0
BUCKET_SECONDS = 5.0


class Backpressure:
    """Started by the service host with the gateway (`Wiring.background`)."""

    def __init__(self, js: Any, redis: Redis, settings: Settings, *,
                 watched: Sequence[Watched] | None = None,
                 clock: Callable[[], float] = time.time):
        self._js = js
        self.bound = settings.backpressure_lag_seconds
        self.poll_seconds = settings.backpressure_poll_seconds
        self.max_retry_after = settings.backpressure_max_retry_after_seconds
        self._watched = list(watched) if watched is not None else None
        self._clock = clock
        self.load = TenantLoad(redis, bucket_seconds=BUCKET_SECONDS,
                               history_seconds=HISTORY_SECONDS)
        #: the last measurement; None: not measured yet, or the last measurement failed
        self.lag: PipelineLag | None = None
        #: accepted items per tenant over the lag window, read by the last poll over the bound
        self._counts: dict[str, int] = {}
        #: this replica's items accepted since `_counts` was read
        self._since: Counter[str] = Counter()
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.bound > 0

    def start(self) -> asyncio.Task[None] | None:
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._run(), name="gateway-backpressure")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # the poll must outlive any one failure
                log.exception("backpressure poll failed")
            await asyncio.sleep(self.poll_seconds)

    async def poll(self) -> None:
        """One measurement: the lag, the counts flushed, the shares' snapshot if over bound."""
        now = self._clock()
        if self._watched is None:
            self._watched = watched_projections()
        try:
            lag = await asyncio.wait_for(
                pipeline_lag(self._js, self._watched, now=now, active_within=self.bound),
                timeout=max(2.0, 2 * self.poll_seconds))
        except Exception as exc:
            metrics.LAG_FAILURES.inc()
            if not self._failing:
                log.warning("pipeline lag cannot be measured; ingest is let through until it "
                            "can", extra={"error": repr(exc)})
            self._failing = True
            self.lag = None
        else:
            if self._failing:
                log.info("pipeline lag measured again", extra={"lag_seconds": lag.seconds})
            self._failing = False
            self.lag = lag
            metrics.PIPELINE_LAG.set(lag.seconds)
        await self.load.flush(now)
        if self.lag is not None and over_bound(self.lag, self.bound):
            self._counts = await self.load.counts(self.lag.seconds, now)
        else:
            self._counts = {}
        self._since.clear()

    def check(self, tenant: str, items: int) -> None:
        """Raise the 429 when `tenant`'s ingest is pushed back; else return."""
        lag = self.lag
        if lag is None or not over_bound(lag, self.bound):
            return
        counts = Counter(self._counts)
        counts.update(self._since)
        push = decide(tenant, counts, lag, bound_seconds=self.bound,
                      max_retry_after=self.max_retry_after)
        if push is None:
            return
        metrics.SHED_REQUESTS.labels(push.reason, push.projection).inc()
        metrics.SHED_ITEMS.labels(push.reason, push.projection).inc(items)
        raise GatewayError("rate_limited", push.message(), 429, retry_after=push.retry_after,
                           backpressure=push.details())

    def accepted(self, tenant: str, items: int) -> None:
        """Count items stored for `tenant` (duplicates are not: they add nothing to do)."""
        if not self.enabled or items <= 0:
            return
        self.load.record(tenant, items, self._clock())
        if self.lag is not None and over_bound(self.lag, self.bound):
            self._since[tenant] += items
