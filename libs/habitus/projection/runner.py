"""The projection runner: the one way services consume a stream.

Guarantees, and how:

* **Exactly-once effects.** A batch is applied inside one Postgres transaction that also moves the
  projection's checkpoint (the stream sequence). Deliveries at or below the checkpoint are
  acknowledged without being applied, so a redelivery after a crash between commit and ack
  changes nothing.
* **Order.** One active runner per projection (a Postgres advisory lock elects it; an epoch on the
  checkpoint row fences a runner that lost the lock); batches are applied one after the other,
  each sorted by stream sequence; nothing is ever given back one message at a time: a failure
  recreates the consumer at checkpoint + 1 (a rewind), so deliveries always arrive in order and
  acknowledging a batch's latest delivery acknowledges everything before it.
* **No loss.** Nothing is acknowledged before its transaction committed. Transient faults
  (Postgres or NATS unavailable) are retried with backoff; if they persist the runner pauses
  and starts again from its checkpoint (a rewind). Nothing is dropped or counted as poison.
* **Poison is isolated.** An event that fails validation, or whose data the database can never
  store (a `DataError`), goes to HABITUS_DLQ at once, without retries, so one tenant's bad data
  never holds up another tenant's events; one whose apply keeps raising otherwise is retried
  until it failed `max_deliver` times and then goes to the DLQ. Events before it in the batch
  commit; events after it wait, so a user's order is kept. Every dead letter is also recorded
  beside the checkpoint, so a command waiting on its event learns that it was given up on.
* **An event id applies once, ever.** The ids a projection applied are recorded in the batch
  transaction; a copy re-published past the stream's duplicate window is acknowledged and
  skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import Error as NatsJsError
from nats.js.errors import NotFoundError
from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from habitus.bus.publisher import EventPublisher
from habitus.bus.pull import BatchPuller, Delivery, delivery_info
from habitus.db.checkpoints import (
    AppliedKey,
    checkpoint_table,
    claim_unapplied,
    record_dead_letter,
)
from habitus.db.leader import LeaderLock, LostLeadership
from habitus.events import CATALOG, Catalog, EventValidationError
from habitus.projection.base import ApplyContext, Delivered, Projection
from habitus.projection.dlq import DeadLetter, send_to_dlq
from habitus.telemetry import metrics

log = logging.getLogger(__name__)

TRANSIENT_DB = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
# OutboundBufferLimitError: publishing while disconnected (connections buffer nothing, so a
# publish during a reconnect fails at once instead of going out after its caller gave up).
TRANSIENT_BUS = (NatsTimeoutError, NoRespondersError, ConnectionClosedError,
                 OutboundBufferLimitError, asyncio.TimeoutError)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying at once: the database or the bus is briefly unavailable."""
    return isinstance(exc, TRANSIENT_DB + TRANSIENT_BUS)


def is_about_the_event(exc: BaseException) -> bool:
    """Could this failure be the event's fault (and so, repeated, make it poison)?

    Data and integrity errors and the projection's own exceptions can be; anything else from
    the database (a read-only failover, a missing table) or the bus (a full stream, no JetStream
    leader) is the system's, and counting it would dead-letter healthy events during an outage.
    """
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return True
    return not isinstance(exc, psycopg.Error | NatsError | NatsJsError)


def is_permanent(exc: BaseException) -> bool:
    """Can never succeed however often it is retried: the event carries data the database
    cannot store (a NUL byte, a number out of range, ...) or that builds no valid consequence.
    Such an event is dead-lettered at once instead of after `max_deliver` paced attempts."""
    return isinstance(exc, psycopg.DataError | EventValidationError | ValidationError
                      | UnicodeError)


class Fenced(Exception):
    """Another runner (or a replay) claimed the projection since this one started."""


class Rewind(Exception):
    """Events of this batch were not applied: start again from the checkpoint after `delay`.

    Nothing is ever given back to the stream one message at a time (nak): the consumer is
    recreated at checkpoint + 1, so deliveries restart in stream order and an acknowledgement of
    the latest delivery can safely acknowledge everything delivered before it."""

    def __init__(self, delay: float, reason: str):
        super().__init__(reason)
        self.delay = delay


@dataclass
class RunnerConfig:
    batch_size: int = 500
    fetch_timeout: float = 1.0
    ack_wait: float = 30.0
    #: deliveries of an event whose apply keeps failing before it goes to the DLQ
    max_deliver: int = 5
    #: pause before starting again from the checkpoint, by failed attempts (the last repeats)
    retry_delays: Sequence[float] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
    transient_attempts: int = 5
    transient_max_wait: float = 4.0
    standby_poll: float = 2.0
    graceful_timeout: float = 30.0


@dataclass
class _Item:
    msg: Msg
    seq: int
    num_delivered: int
    num_pending: int
    consumer_seq: int
    delivered: Delivered | None = None
    invalid: str | None = None
    #: other deliveries of the same stream sequence in this batch (a redelivery that arrived
    #: before the first copy was handled): answered with the first, never applied twice
    copies: list[Msg] = field(default_factory=list)


@dataclass
class BatchOutcome:
    applied: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    returned: int = 0
    errors: list[str] = field(default_factory=list)


class ProjectionRunner:
    def __init__(
        self,
        projection: Projection,
        nc: Client,
        pool: AsyncConnectionPool,
        *,
        config: RunnerConfig | None = None,
        catalog: Catalog = CATALOG,
        lock_conninfo: str | None = None,
    ):
        self.projection = projection
        self.config = config or RunnerConfig()
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream(timeout=10.0)
        self._pool = pool
        self._catalog = catalog
        self._publisher = EventPublisher(self._js, catalog)
        self._lock = LeaderLock(
            lock_conninfo or str(pool.conninfo), f"projection:{projection.name}"
        )
        # Events up to this sequence already had their consequences published (before a
        # replay): rebuilding them must not publish those consequences again.
        self._emitted_seq = 0
        self._epoch = 0
        self._checkpoint = 0
        self._sub: BatchPuller | None = None
        self._stopping = asyncio.Event()
        # failed apply attempts per stream sequence (poison detection survives rewinds)
        self._attempts: dict[int, int] = {}
        # The consumer is created afresh on every claim, so its deliveries are numbered 1, 2, ...
        # without gaps (redeliveries included): a gap means deliveries this runner never saw.
        self._next_delivery = 1
        self._task: asyncio.Task[None] | None = None
        self._table = checkpoint_table(projection.schema)

        self.leader = asyncio.Event()
        self.caught_up = asyncio.Event()
        self._label = projection.name

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
        """Run until stopped: wait for leadership, then consume; re-claim after being fenced."""
        while not self._stopping.is_set():
            try:
                if not await self._acquire_leadership():
                    await self._sleep(self.config.standby_poll)
                    continue
                await self._claim()
                await self._consume()
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

    # ------------------------------------------------------------------ leadership

    async def _acquire_leadership(self) -> bool:
        if self._lock.held:
            try:
                await self._lock.check()  # a dead lock connection is only noticed by using it
            except LostLeadership:
                self.leader.clear()
        if await self._lock.try_acquire():
            self.leader.set()
            return True
        self.leader.clear()
        return False

    async def _release_lock(self) -> None:
        self.leader.clear()
        await self._lock.release()

    async def _release(self) -> None:
        await self._drop_subscription()
        await self._release_lock()

    async def _check_lock(self) -> None:
        try:
            await self._lock.check()
        except LostLeadership as exc:
            self.leader.clear()
            raise Fenced(str(exc)) from exc

    async def _claim(self) -> None:
        """Bump the epoch (fencing any older runner) and align the consumer with the checkpoint."""
        await self.claim_checkpoint()
        await self._ensure_consumer()

    async def claim_checkpoint(self) -> int:
        """Fence older runners and load the checkpoint; returns it."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {self._table} (projection) VALUES (%s) ON CONFLICT DO NOTHING",
                (self._label,),
            )
            cur = await conn.execute(
                f"UPDATE {self._table} SET epoch = epoch + 1, updated_at = now() "
                "WHERE projection = %s RETURNING epoch, last_seq, emitted_seq",
                (self._label,),
            )
            row = await cur.fetchone()
            assert row is not None
            self._epoch, self._checkpoint = int(row[0]), int(row[1])
            self._next_delivery = 1
            self._emitted_seq = int(row[2])
        metrics.CHECKPOINT.labels(self._label).set(self._checkpoint)
        return self._checkpoint

    # ------------------------------------------------------------------ consumer

    def _consumer_config(self, start_seq: int) -> ConsumerConfig:
        p = self.projection
        filters = list(p.filter_subjects)
        cfg = ConsumerConfig(
            durable_name=p.durable,
            description=f"projection {p.name}",
            # Acknowledging the latest delivery acknowledges all before it: safe because events
            # are never given back one by one (a failure rewinds the whole consumer).
            ack_policy=AckPolicy.ALL,
            ack_wait=self.config.ack_wait,
            max_deliver=-1,
            # Room for the batch being applied and the next one being fetched.
            max_ack_pending=2 * self.config.batch_size,
            max_waiting=8,
        )
        if len(filters) == 1:
            cfg.filter_subject = filters[0]
        else:
            cfg.filter_subjects = filters
        if start_seq <= 1:
            cfg.deliver_policy = DeliverPolicy.ALL
        else:
            cfg.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = start_seq
        return cfg

    async def _ensure_consumer(self) -> None:
        """Start the consumer afresh at checkpoint + 1 on every claim.

        The checkpoint in Postgres is the one truth about position. A consumer left over from an
        earlier claim may hold deliveries that were given back and would come round again out
        of order; recreating it means deliveries start in stream order from exactly where the
        view is. It also covers a replay, a restored database, and a changed filter.
        """
        p = self.projection
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(p.stream, p.durable)
        await self._js.add_consumer(p.stream, self._consumer_config(self._checkpoint + 1))
        log.info("consumer started from checkpoint",
                 extra={"projection": self._label, "checkpoint": self._checkpoint})
        self._sub = BatchPuller(self._nc, p.stream, p.durable)
        await self._sub.start()

    async def _drop_subscription(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.stop()
            sub.drain_buffer()  # never handed out; the next claim starts from the checkpoint

    # ------------------------------------------------------------------ consuming

    async def _consume(self) -> None:
        """Fetch the next batch while the current one is applied: the network wait overlaps
        the database work. Batches are still applied one after the other, in order."""
        fetch = self._next_fetch()
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await fetch
                except NatsTimeoutError:
                    await self._check_lock()
                    await self._check_epoch()
                    await self._mark_caught_up()
                    fetch = self._next_fetch()
                    continue
                self._check_contiguous(msgs)
                fetch = self._next_fetch()
                await self.handle_batch(msgs)
        finally:
            await self._discard_prefetched(fetch)

    def _next_fetch(self) -> asyncio.Task[list[Msg]]:
        assert self._sub is not None
        return asyncio.create_task(
            self._sub.fetch(self.config.batch_size, timeout=self.config.fetch_timeout)
        )

    async def _discard_prefetched(self, fetch: asyncio.Task[list[Msg]]) -> None:
        """Drop the batch fetched ahead: the next claim starts again from the checkpoint."""
        if not fetch.done():
            fetch.cancel()
        with contextlib.suppress(BaseException):
            await fetch

    async def _check_epoch(self) -> None:
        """While idle, notice a replay (or another claim) at once rather than at the next
        commit, so a reset projection rebuilds without waiting for new events."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(f"SELECT epoch FROM {self._table} WHERE projection = %s",
                                     (self._label,))
            row = await cur.fetchone()
        if row is None or int(row[0]) != self._epoch:
            raise Fenced(f"epoch {self._epoch} is no longer current")

    async def _mark_caught_up(self) -> None:
        p = self.projection
        info = await self._js.consumer_info(p.stream, p.durable)
        metrics.PENDING.labels(self._label).set(info.num_pending or 0)
        if not info.num_pending and not info.num_ack_pending:
            self.caught_up.set()

    async def handle_batch(self, msgs: Sequence[Msg]) -> BatchOutcome:
        started = time.perf_counter()
        items = self._unique(msgs)
        outcome = BatchOutcome()
        fresh = [i for i in items if i.seq > self._checkpoint]
        stale = [i for i in items if i.seq <= self._checkpoint]
        if stale:
            metrics.REDELIVERED.labels(self._label).inc(len(stale))
            outcome.skipped = len(stale)
        if fresh:
            await self._apply_with_retries(fresh, outcome)  # raises unless all are applied
        await self._ack(items)
        if fresh:
            metrics.PENDING.labels(self._label).set(fresh[-1].num_pending)
            if fresh[-1].num_pending == 0:
                self.caught_up.set()
            else:
                self.caught_up.clear()
        metrics.BATCH_SECONDS.labels(self._label).observe(time.perf_counter() - started)
        return outcome

    def _check_contiguous(self, msgs: Sequence[Msg]) -> None:
        """Every delivery since the claim must reach this runner, in order; otherwise acking
        (ack-all) and checkpointing past a missing one would lose it."""
        numbers = sorted(delivery_info(m).consumer_seq for m in msgs)
        if not numbers:
            return
        if numbers[0] != self._next_delivery or numbers[-1] - numbers[0] + 1 != len(numbers):
            raise Rewind(0.0, f"deliveries {self._next_delivery}.. expected, got "
                              f"{numbers[0]}..{numbers[-1]} ({len(numbers)})")
        self._next_delivery = numbers[-1] + 1

    def _unique(self, msgs: Sequence[Msg]) -> list[_Item]:
        by_seq: dict[int, _Item] = {}
        for msg in msgs:
            info = delivery_info(msg)
            if info.stream_seq in by_seq:
                by_seq[info.stream_seq].copies.append(msg)
            else:
                by_seq[info.stream_seq] = self._item(msg, info)
        return [by_seq[s] for s in sorted(by_seq)]

    def _item(self, msg: Msg, info: Delivery) -> _Item:
        item = _Item(msg, info.stream_seq, info.num_delivered, info.num_pending,
                     info.consumer_seq)
        try:
            event = self._catalog.decode_message(msg.data, msg.headers)
            item.delivered = Delivered(event, item.seq, msg.subject, info.num_delivered)
        except EventValidationError as exc:
            item.invalid = str(exc)
        except Exception as exc:  # an upcaster's bug must not stall the consumer
            item.invalid = f"{type(exc).__name__}: {exc}"
        return item

    async def _apply_with_retries(self, items: list[_Item], outcome: BatchOutcome) -> None:
        await self._check_lock()
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(is_transient),
                stop=stop_after_attempt(self.config.transient_attempts),
                wait=wait_exponential(multiplier=0.2, max=self.config.transient_max_wait),
                reraise=True,
                before_sleep=self._before_retry(items),
            ):
                with attempt:
                    await self._apply(items, outcome)
        except Exception as exc:
            if not is_transient(exc):
                raise
            # Still unavailable: nothing of this batch is applied; start again from the
            # checkpoint after a pause.
            outcome.returned = len(items)
            raise Rewind(self.config.retry_delays[-1], f"transient faults: {exc!r}") from exc

    def _before_retry(self, items: list[_Item]) -> Any:
        async def hook(_: Any) -> None:
            metrics.RETRIES.labels(self._label).inc()
            with contextlib.suppress(Exception):
                for item in items:
                    await item.msg.in_progress()

        return hook

    async def _apply(self, items: list[_Item], outcome: BatchOutcome) -> None:
        invalid = [i for i in items if i.invalid is not None]
        valid = [i for i in items if i.delivered is not None]
        # Dead-letter invalid events before the checkpoint passes them: a crash in between
        # re-sends them, and the DLQ's own Nats-Msg-Id drops the copy.
        for item in invalid:
            await self._dead_letter(item, "invalid_event", item.invalid or "")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                async with conn.cursor() as cur:
                    for item in invalid:
                        await self._record_dead_letter(cur, item, "invalid_event",
                                                       item.invalid or "")
                    first = await self._first_applications(cur, valid)
                    ctx = ApplyContext(suppress_through=self._emitted_seq)
                    await self.projection.apply_batch(
                        cur, [i.delivered for i in first if i.delivered], ctx
                    )
                    await self._publish(ctx)
                    await self._commit_checkpoint(cur, items[-1].seq)
        except Exception as exc:
            if is_transient(exc) or isinstance(exc, Fenced):
                raise
            log.warning(
                "batch apply failed; isolating the failing event",
                extra={"projection": self._label, "error": repr(exc)},
            )
            await self._apply_one_by_one(items, outcome)
            return
        self._checkpoint = items[-1].seq
        self._forget_attempts()
        metrics.CHECKPOINT.labels(self._label).set(self._checkpoint)
        metrics.APPLIED.labels(self._label).inc(len(first))
        if len(first) < len(valid):
            metrics.REPUBLISHED.labels(self._label).inc(len(valid) - len(first))
        outcome.applied += len(first)
        outcome.skipped += len(valid) - len(first)
        outcome.dead_lettered += len(invalid)

        await self._after_commit([i.delivered for i in first if i.delivered])

    async def _first_applications(self, cur: AsyncCursor[Any], items: list[_Item]
                                  ) -> list[_Item]:
        """The items whose event id this projection never applied: the others are copies
        re-published after the stream's duplicate window (or twice in this batch)."""
        keys: dict[tuple[str, str, str], AppliedKey] = {}
        for item in items:
            assert item.delivered is not None
            event = item.delivered.event
            ident = (event.tenant_id, event.user_id, event.event_id)
            if ident not in keys:
                keys[ident] = AppliedKey(*ident, item.seq)
        fresh = await claim_unapplied(cur, self.projection.schema, self._label,
                                      list(keys.values()))
        return [i for i in items if i.seq in fresh]

    async def _record_dead_letter(self, cur: AsyncCursor[Any], item: _Item, reason: str,
                                  detail: str) -> None:
        event_id = item.delivered.event.event_id if item.delivered else None
        await record_dead_letter(cur, self.projection.schema, self._label, item.seq, event_id,
                                 reason, detail)

    async def _apply_one_by_one(self, items: list[_Item], outcome: BatchOutcome) -> None:
        """Slow path: a savepoint per event finds the one that fails; those before it commit.

        An event whose data can never be stored goes to the DLQ at once. Any other failing
        event is retried from the checkpoint (a rewind) until it has failed `max_deliver`
        times; then it goes to the DLQ and the events after it go on."""
        done: list[_Item] = []
        held: list[_Item] = []
        dead: list[tuple[_Item, str]] = []
        applied: list[_Item] = []
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor() as cur:
                for index, item in enumerate(items):
                    if item.delivered is None:
                        await self._record_dead_letter(cur, item, "invalid_event",
                                                       item.invalid or "")
                        done.append(item)  # already dead-lettered as invalid
                        continue
                    ctx = ApplyContext(suppress_through=self._emitted_seq)
                    try:
                        async with conn.transaction():  # SAVEPOINT
                            if not await self._first_applications(cur, [item]):
                                done.append(item)  # a re-published copy
                                outcome.skipped += 1
                                continue
                            await self.projection.apply_batch(cur, [item.delivered], ctx)
                            await self._publish(ctx)
                    except Exception as exc:
                        if is_transient(exc):
                            raise
                        if not is_about_the_event(exc):
                            raise Rewind(self.config.retry_delays[-1],
                                         f"system fault at event {item.seq}: {exc!r}") from exc
                        attempts = self._attempts.get(item.seq, 0) + 1
                        self._attempts[item.seq] = attempts
                        if is_permanent(exc) or attempts >= self.config.max_deliver:
                            dead.append((item, f"{type(exc).__name__}: {exc}"))
                            done.append(item)
                            continue
                        log.warning(
                            "event apply failed; will retry",
                            extra={"projection": self._label, "seq": item.seq,
                                   "attempts": attempts, "error": repr(exc)},
                        )
                        outcome.errors.append(repr(exc))
                        held = items[index:]
                        break
                    done.append(item)
                    applied.append(item)
                if dead:
                    # Hold the checkpoint row (and check the epoch) first: a runner fenced
                    # since must not dead-letter an event its successor applies.
                    await self._lock_epoch(cur)
                for item, reason in dead:
                    await self._dead_letter(item, "apply_failed", reason)
                    await self._record_dead_letter(cur, item, "apply_failed", reason)
                if done:
                    await self._commit_checkpoint(cur, done[-1].seq)
        if done:
            self._checkpoint = done[-1].seq
            metrics.CHECKPOINT.labels(self._label).set(self._checkpoint)
            metrics.APPLIED.labels(self._label).inc(len(applied))
            await self._after_commit([i.delivered for i in applied if i.delivered])
        outcome.applied += len(applied)
        outcome.dead_lettered += len(dead) + sum(1 for i in done if i.invalid is not None)
        self._forget_attempts()
        if held:
            outcome.returned += len(held)
            attempts = self._attempts[held[0].seq]
            raise Rewind(self._delay_for(attempts), f"event {held[0].seq} failed")

    def _forget_attempts(self) -> None:
        for seq in [s for s in self._attempts if s <= self._checkpoint]:
            del self._attempts[seq]

    async def _after_commit(self, delivered: list[Delivered]) -> None:
        if not delivered:
            return
        try:
            await self.projection.after_commit(delivered)
        except Exception:
            log.exception("after_commit failed", extra={"projection": self._label})

    async def _lock_epoch(self, cur: AsyncCursor[Any]) -> None:
        await cur.execute(
            f"SELECT 1 FROM {self._table} WHERE projection = %s AND epoch = %s FOR UPDATE",
            (self._label, self._epoch),
        )
        if await cur.fetchone() is None:
            raise Fenced(f"epoch {self._epoch} is no longer current")

    async def _commit_checkpoint(self, cur: AsyncCursor[Any], seq: int) -> None:
        await cur.execute(
            f"UPDATE {self._table} SET last_seq = %s, emitted_seq = GREATEST(emitted_seq, %s), "
            "updated_at = now() WHERE projection = %s AND epoch = %s",
            (seq, seq, self._label, self._epoch),
        )
        if cur.rowcount != 1:
            raise Fenced(f"epoch {self._epoch} is no longer current")

    async def _publish(self, ctx: ApplyContext) -> None:
        if not ctx.emitted:
            return
        results = await self._publisher.publish_many(ctx.emitted)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _dead_letter(self, item: _Item, reason: str, detail: str) -> None:
        await send_to_dlq(
            self._js,
            DeadLetter(
                consumer=self.projection.durable,
                reason=reason,
                detail=detail,
                stream=self.projection.stream,
                seq=item.seq,
                subject=item.msg.subject,
                deliveries=max(item.num_delivered, self._attempts.get(item.seq, 0)),
                data=item.msg.data,
            ),
        )
        metrics.DLQ.labels(self.projection.durable, reason).inc()
        log.error(
            "event sent to DLQ",
            extra={"projection": self._label, "seq": item.seq, "reason": reason,
                   "detail": detail[:500]},
        )

    def _delay_for(self, attempts: int) -> float:
        delays = self.config.retry_delays
        return delays[min(max(attempts - 1, 0), len(delays) - 1)]

    async def _ack(self, items: Sequence[_Item]) -> None:
        """Ack-all: the latest delivery of the batch acknowledges every delivery before it
        (all of them applied, or at or below the checkpoint)."""
        latest = max(((item.consumer_seq, item.msg) for item in items), default=None,
                     key=lambda pair: pair[0])
        copies = [(delivery_info(m).consumer_seq, m) for item in items for m in item.copies]
        if copies:
            latest = max([*([latest] if latest else []), *copies], key=lambda pair: pair[0])
        if latest is not None:
            with contextlib.suppress(Exception):  # a lost ack is a harmless redelivery
                await latest[1].ack()
