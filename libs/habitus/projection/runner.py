"""The projection runner: the one way services consume a stream.

Guarantees (each module holds the how):

* **Exactly-once effects**: a batch and the checkpoint move in one Postgres transaction;
  deliveries at or below the checkpoint are acknowledged without being applied (`batch`,
  `checkpoints`).
* **Order**: one active runner per projection, elected by an advisory lock and fenced by the
  checkpoint's epoch (`leadership`, `checkpoints`); batches are applied one after the other, each
  sorted by stream sequence; nothing is given back one message at a time: a failure recreates
  the consumer at checkpoint + 1 (a rewind), so deliveries always arrive in order and
  acknowledging a batch's latest delivery acknowledges everything before it (`consumer`).
* **No loss**: nothing is acknowledged before its transaction committed; transient faults are
  retried, then rewound, never dropped or counted as poison (`faults`, `batch`).
* **Poison is isolated**: an event that can never apply goes to HABITUS_DLQ (at once, or after
  `max_deliver` failures) and is recorded beside the checkpoint; events before it commit,
  events after it wait (`batch`, `dlq`).
* **An event id applies once, ever**: the applied ids are recorded in the batch transaction
  (`batch`, `checkpoints`).
* **Partitions**: a runner applies one partition of its projection (the whole of it by
  default), with its own checkpoint row, consumer and lock (`partitions`, `checkpoints`). A
  partition being repartitioned away drains: it applies up to the cutover, then leaves the
  layout and the runner ends (`gone` is set); a new partition waits (`pending`) until the old
  ones drained.

This module is the loop that composes them: wait for leadership, claim (bump the epoch and load
the checkpoint), recreate the consumer at checkpoint + 1, then fetch one batch ahead while the
current one is applied and acknowledged. `Fenced` re-claims; `Rewind` drops the consumer and
starts again from the checkpoint after a pause; any other error also gives up the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from psycopg_pool import AsyncConnectionPool

from habitus.bus.publisher import EventPublisher
from habitus.bus.pull import delivery_info
from habitus.db.leader import LeaderLock
from habitus.events import CATALOG, Catalog
from habitus.events.catalog import warm_keys
from habitus.projection.acks import ack_all
from habitus.projection.base import Projection
from habitus.projection.batch import BatchApplier
from habitus.projection.checkpoints import CheckpointStore, PartitionGone
from habitus.projection.consumer import ProjectionConsumer, check_contiguous
from habitus.projection.decode import Item, decode_batch, owners_of
from habitus.projection.faults import Fenced, Rewind, is_transient
from habitus.projection.leadership import Leadership, Lock, lock_name
from habitus.projection.outcome import BatchOutcome
from habitus.projection.partitions import WHOLE, Partition
from habitus.telemetry import metrics
from habitus.telemetry.gc_tuning import collection_paused

__all__ = ("BatchOutcome", "Fenced", "ProjectionRunner", "Rewind", "RunnerConfig")

log = logging.getLogger(__name__)


@dataclass
class RunnerConfig:
    batch_size: int = 500
    fetch_timeout: float = 1.0
    #: how long an idle runner's fetch may wait at most: each fetch that finds nothing waits
    #: twice as long as the one before, from `fetch_timeout` up to this, and the first batch
    #: brings it back. A fetch returns as soon as an event arrives, so waiting longer costs
    #: no latency; what an idle fetch's end does (the lock, the fence's epoch and what is
    #: pending checked, three round trips) then runs every few seconds, not every second,
    #: in each of the dozens of runners a deployment keeps idle
    idle_fetch_timeout: float = 4.0
    #: once events have flowed steadily for a while (`habitus.bus.pull.SUSTAINED`), how long
    #: a batch that is not full waits for more before it is applied: every batch pays a fixed
    #: part (its transaction, the checkpoint, the ack, the statements a projection sends once
    #: per batch), and a runner that keeps up would otherwise apply a few events at a time. A
    #: lone event and a short burst's tail are never held (docs/foundation.md)
    linger: float = 0.05
    ack_wait: float = 30.0
    #: deliveries of an event whose apply keeps failing before it goes to the DLQ
    max_deliver: int = 5
    #: pause before starting again from the checkpoint, by failed attempts (the last repeats)
    retry_delays: Sequence[float] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
    transient_attempts: int = 5
    transient_max_wait: float = 4.0
    standby_poll: float = 2.0
    graceful_timeout: float = 30.0
    #: how often (at most) the lag and ack-pending gauges ask the server (two or three small
    #: requests): when idle, and between batches under load
    lag_interval: float = 5.0
    #: how long an event whose data key cannot be read here waits (its partition with it)
    #: before it goes to the DLQ: a key store or KEK being fixed, not one lost for good
    key_wait_seconds: float = 3600.0


class ProjectionRunner:
    #: the batch fetched ahead, decoded as soon as it arrived: (its messages, its items)
    _ahead: tuple[Sequence[Msg], list[Item]] | None = None

    def __init__(
        self,
        projection: Projection,
        nc: Client,
        pool: AsyncConnectionPool,
        *,
        config: RunnerConfig | None = None,
        catalog: Catalog = CATALOG,
        lock_conninfo: str | None = None,
        partition: Partition = WHOLE,
        owner: str | None = None,
        lock: Lock | None = None,
    ):
        """`partition`: the one this runner applies (the whole projection by default);
        `owner`: the replica it runs in, recorded with each claim; `lock`: its leadership
        lock (default: one on a connection of its own)."""
        self.projection = projection
        self.partition = partition
        self.owner = owner
        self.config = config or RunnerConfig()
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream(timeout=10.0)
        self._pool = pool
        self._catalog = catalog
        self._label = projection.name
        self._part = partition.label
        self._store = CheckpointStore(projection.schema)
        self._leadership = Leadership(
            lock_conninfo or str(pool.conninfo), projection.name,
            lock or LeaderLock(lock_conninfo or str(pool.conninfo),
                               lock_name(projection.name, partition.suffix)))
        self._consumer = ProjectionConsumer(nc, self._js, projection, self.config, partition)
        self._batches = BatchApplier(
            projection, pool, self._js, self._store,
            lambda: self._check_lock(),  # late-bound: looked up on the runner at every batch
            self.config, EventPublisher(self._js, catalog), partition,
        )
        #: the stream sequence a draining partition stops at (None: not draining)
        self._cutover: int | None = None
        #: set once the partition has left the projection's layout (the runner has ended)
        self.gone = asyncio.Event()
        self._stopping = asyncio.Event()
        # The consumer is created afresh on every claim, so its deliveries are numbered 1, 2, ...
        # without gaps (redeliveries included): a gap means deliveries this runner never saw.
        self._next_delivery = 1
        self._task: asyncio.Task[None] | None = None

        self.leader = self._leadership.event
        self.caught_up = asyncio.Event()
        self._lag_at = -float("inf")

    @property
    def checkpoint(self) -> int:
        """The stream sequence this runner's view includes (as of its last claim or commit)."""
        return self._batches.checkpoint

    @property
    def _checkpoint(self) -> int:
        return self._batches.checkpoint

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name=f"projection:{self.projection.name}")
        return self._task

    async def stop(self) -> None:
        """Finish the batch in flight (bounded by graceful_timeout), then release everything."""
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.config.graceful_timeout)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._release()

    async def run(self) -> None:
        """Run until stopped, or until the partition left the layout: wait for leadership,
        then consume; re-claim after being fenced."""
        while not self._stopping.is_set():
            try:
                if not await self.try_lead():
                    await self._sleep(self.config.standby_poll)
                    continue
                if not await self._claim():
                    await self._sleep(self.config.standby_poll)  # pending: the old drain
                    continue
                await self._consume()
            except PartitionGone as gone:
                log.info("partition left the layout; its runner ends",
                         extra={"projection": self._label, "partition": self._part,
                                "reason": str(gone)})
                self.gone.set()
                break
            except Fenced:
                log.warning("projection fenced; re-claiming", extra={"projection": self._label})
                await self._drop_subscription()
            except Rewind as rewind:
                log.warning("projection rewinding to its checkpoint",
                            extra={"projection": self._label, "reason": str(rewind),
                                   "in_seconds": rewind.delay})
                await self._drop_subscription()
                await self._sleep(rewind.delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    log.exception("projection runner error", extra={"projection": self._label})
                else:
                    log.warning(
                        "projection runner transient fault",
                        extra={"projection": self._label, "error": repr(exc)},
                    )
                await self._drop_subscription()
                await self._release_lock()
                await self._sleep(1.0)
        await self._drop_subscription()
        if self.gone.is_set():  # its consumer and lock go with it
            with contextlib.suppress(Exception):
                await self._consumer.remove()
            await self._release_lock()

    async def run_until_caught_up(self, timeout: float = 300.0) -> None:
        """Consume until no events are pending, then stop (replay, tests, one-shot jobs)."""
        task = self.start()
        waiter = asyncio.create_task(self.caught_up.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task in done:
            task.result()
        if waiter not in done:
            await self.stop()
            raise TimeoutError(f"{self._label} did not catch up in {timeout}s")
        await self.stop()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # ------------------------------------------------------------------ leadership and claim

    async def try_lead(self) -> bool:
        """Take the projection's leadership if no other runner holds it (True if this one
        does now)."""
        return await self._leadership.try_acquire()

    async def _acquire_leadership(self) -> bool:
        return await self.try_lead()

    async def _release_lock(self) -> None:
        await self._leadership.release()

    async def _release(self) -> None:
        await self._drop_subscription()
        await self._release_lock()

    async def _check_lock(self) -> None:
        await self._leadership.check()

    async def _claim(self) -> bool:
        """Bump the epoch (fencing any older runner) and align the consumer with the
        checkpoint; False (no consumer) while the partition waits for an old layout's drain."""
        state = await self._claim_partition()
        if state == "pending":
            return False
        await self._consumer.restart_at(self._batches.checkpoint)
        return True

    async def claim_checkpoint(self) -> int:
        """Fence older runners and load the checkpoint; returns it."""
        await self._claim_partition()
        return self._batches.checkpoint

    async def _claim_partition(self) -> str:
        async with self._pool.connection() as conn, conn.transaction():
            claim = await self._store.claim(conn, self._label, self.partition,
                                            owner=self.owner)
        self._batches.claimed(claim)
        self._cutover = claim.cutover_seq if claim.state == "draining" else None
        self._next_delivery = 1
        return claim.state

    async def _check_epoch(self) -> None:
        """While idle, notice a replay (or another claim) at once rather than at the next
        commit, so a reset projection rebuilds without waiting for new events."""
        async with self._pool.connection() as conn:
            epoch = await self._store.epoch(conn, self._label, self.partition)
        if epoch is None:
            raise PartitionGone(f"{self._label} {self._part} is no longer in its layout")
        if epoch != self._batches.epoch:
            raise Fenced(f"epoch {self._batches.epoch} is no longer current")

    async def _finish_drain(self) -> None:
        """Everything of this draining partition up to the cutover is applied: it leaves the
        layout (the last one to go lets the new partitions start) and its consumer goes."""
        assert self._cutover is not None
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor() as cur:
                await self._store.finish_drain(cur, self._label, self.partition,
                                               self._batches.epoch, self._cutover)
        self._batches.checkpoint = self._cutover
        await self._consumer.remove()
        raise PartitionGone(f"{self._label} {self._part} drained up to {self._cutover}")

    # ------------------------------------------------------------------ consuming

    def _consumer_config(self, start_seq: int) -> ConsumerConfig:
        return self._consumer.config(start_seq)

    async def _drop_subscription(self) -> None:
        await self._consumer.stop()

    def _fetch(self, timeout: float | None = None) -> asyncio.Task[list[Msg]]:
        """Fetch the next batch and decode it as soon as it arrives: while the current batch
        waits on the database, not after it (`handle_batch` takes the decoded items)."""
        pull = self._consumer.fetch(timeout)

        async def decoded() -> list[Msg]:
            msgs = await pull  # cancelling this task cancels the pull
            await warm_keys(self._catalog, owners_of(msgs), create=False)
            with collection_paused():
                items = decode_batch(msgs, self._catalog)
                self._ahead = (msgs, items)
            try:  # work done ahead is an optimisation: its failure shows when it is used
                self.projection.ahead([i.delivered for i in items if i.delivered is not None])
            except Exception as exc:
                log.warning("work ahead of a batch failed", extra={
                    "projection": self._label, "error": repr(exc)})
            return msgs

        return asyncio.create_task(decoded())

    def _decoded(self, msgs: Sequence[Msg]) -> list[Item] | None:
        """The items of `msgs` if they were decoded ahead (None: decode them now)."""
        ahead = self._ahead
        return ahead[1] if ahead is not None and ahead[0] is msgs else None

    async def _consume(self) -> None:
        """Fetch (and decode) the next batch while the current one is applied: the network
        wait and the decoding overlap the database work. Batches are still applied one after
        the other, in order."""
        fetch = self._fetch()
        idle_wait = self.config.fetch_timeout
        # A stop does not wait out an idle fetch (up to idle_fetch_timeout): what it would
        # bring is discarded anyway, and the next claim starts again from the checkpoint.
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    break
                try:
                    msgs = fetch.result()
                except NatsTimeoutError:
                    await self._check_lock()
                    await self._check_epoch()
                    if await self._mark_caught_up() and self._cutover is not None:
                        await self._finish_drain()
                    idle_wait = min(2 * idle_wait, max(self.config.idle_fetch_timeout,
                                                       self.config.fetch_timeout))
                    fetch = self._fetch(idle_wait)
                    continue
                idle_wait = self.config.fetch_timeout
                self._check_contiguous(msgs)
                fetch = self._fetch()
                outcome = await self.handle_batch(msgs)
                if outcome.beyond_cutover:
                    await self._finish_drain()
        finally:
            stopping.cancel()
            await self._consumer.discard(fetch)
            self._ahead = None

    def _check_contiguous(self, msgs: Sequence[Msg]) -> None:
        items = self._decoded(msgs)
        # decoded items carry their consumer sequence: the ack subjects are not parsed again
        seqs = None if items is None else [
            *(i.consumer_seq for i in items),
            *(delivery_info(m).consumer_seq for i in items for m in i.copies)]
        self._next_delivery = check_contiguous(msgs, self._next_delivery, seqs)

    async def _mark_caught_up(self) -> bool:
        """After an idle fetch: ask the server what is pending; True if nothing is."""
        pending, ack_pending = await self._consumer.pending()
        metrics.PENDING.labels(self._label, self._part).set(pending)
        metrics.ACK_PENDING.labels(self._label, self._part).set(ack_pending)
        if not pending and not ack_pending:
            self.caught_up.set()
            metrics.LAG.labels(self._label, self._part).set(0)
            return True
        await self._refresh_lag(force=False)
        return False

    async def _refresh_lag(self, *, force: bool) -> None:
        """`habitus_projection_lag_events` (and ack-pending): the stream's last sequence on the
        projection's subjects minus the checkpoint, asked of the server at most every
        `lag_interval` seconds. A failure leaves the gauges as they were."""
        now = time.monotonic()
        if not force and now - self._lag_at < self.config.lag_interval:
            return
        self._lag_at = now
        try:
            last = await self._consumer.last_seq()
            if force:
                _, ack_pending = await self._consumer.pending()
                metrics.ACK_PENDING.labels(self._label, self._part).set(ack_pending)
        except Exception as exc:  # a gauge is never a reason to rewind
            log.debug("lag refresh failed", extra={"projection": self._label,
                                                   "error": repr(exc)})
            return
        metrics.LAG.labels(self._label, self._part).set(max(0, last - self._checkpoint))

    async def handle_batch(self, msgs: Sequence[Msg]) -> BatchOutcome:
        """Apply one batch of deliveries and acknowledge it (see `habitus.projection.batch`)."""
        started = time.perf_counter()
        items = self._decoded(msgs)
        self._ahead = None
        if items is None:
            items = decode_batch(msgs, self._catalog)
        outcome = BatchOutcome()
        if self._cutover is not None:
            # draining: what lies past the cutover is the new layout's (never applied or
            # acknowledged here; the consumer goes with the partition)
            within = [i for i in items if i.seq <= self._cutover]
            outcome.beyond_cutover = len(within) < len(items)
            items = within
        checkpoint = self._batches.checkpoint
        fresh = [i for i in items if i.seq > checkpoint]
        stale = [i for i in items if i.seq <= checkpoint]
        if stale:
            metrics.REDELIVERED.labels(self._label).inc(len(stale))
            outcome.skipped = len(stale)
        if fresh:
            await self._batches.apply(fresh, outcome)  # raises unless all are applied
        if items:
            await self._ack(items)
        if fresh:
            metrics.PENDING.labels(self._label, self._part).set(fresh[-1].num_pending)
            if fresh[-1].num_pending == 0:
                self.caught_up.set()
                # nothing after the last delivery on these subjects: the checkpoint is the end
                metrics.LAG.labels(self._label, self._part).set(0)
            else:
                self.caught_up.clear()
                if time.monotonic() - self._lag_at >= self.config.lag_interval:
                    await self._refresh_lag(force=True)
        metrics.BATCH_SECONDS.labels(self._label).observe(time.perf_counter() - started)
        return outcome

    async def _ack(self, items: Sequence[Item]) -> None:
        await ack_all(items)
