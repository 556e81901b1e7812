"""Applying one batch of deliveries: exactly once, in order, poison isolated.

* **Exactly-once effects.** A batch is applied inside one Postgres transaction that also moves
  the projection's checkpoint (the stream sequence), fenced by the claim's epoch. Deliveries at
  or below the checkpoint are acknowledged without being applied (the runner sorts those out),
  so a redelivery after a crash between commit and ack changes nothing.
* **An event id applies once, ever.** The ids a projection applied are recorded in the batch
  transaction (`CheckpointStore.claim_unapplied`); a copy re-published past the stream's
  duplicate window is acknowledged and skipped.
* **Consequences with the change.** Events the projection emits are published, and acknowledged
  by the stream, before the batch commits; those of events at or below `emitted_seq` were
  published before a replay and are not published again.
* **No loss.** Nothing is acknowledged before its transaction committed. Transient faults are
  retried with backoff; if they persist the batch is given up as a whole (`Rewind`) and the
  runner starts again from its checkpoint. Nothing is dropped or counted as poison.
* **Poison is isolated.** When a batch fails, a savepoint per event finds the one that fails;
  those before it commit. An event that fails validation, or whose data the database can never
  store, goes to HABITUS_DLQ at once, so one tenant's bad data never holds up another's; one
  whose apply keeps raising otherwise is retried (by rewinds) until it failed `max_deliver`
  times and then goes to the DLQ. Events after it wait, so a user's order is kept. Every dead
  letter is also recorded beside the checkpoint, so a command waiting on its event learns that
  it was given up on.
* **Ack-all.** Acknowledging the latest delivery of a batch acknowledges every delivery before
  it (all applied, or at or below the checkpoint); a lost ack is a harmless redelivery.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from habitus.bus.publisher import EventPublisher
from habitus.bus.pull import Delivery, delivery_info
from habitus.events import Catalog, EventValidationError
from habitus.projection.base import ApplyContext, Delivered, Projection
from habitus.projection.checkpoints import AppliedKey, CheckpointStore, Claim
from habitus.projection.dlq import DeadLetter, send_to_dlq
from habitus.projection.faults import (
    Fenced,
    Rewind,
    is_about_the_event,
    is_permanent,
    is_transient,
)
from habitus.subjects import parse_subject
from habitus.telemetry import metrics

log = logging.getLogger(__name__)


class BatchSettings(Protocol):
    """The part of RunnerConfig a batch reads."""

    @property
    def max_deliver(self) -> int: ...
    @property
    def retry_delays(self) -> Sequence[float]: ...
    @property
    def transient_attempts(self) -> int: ...
    @property
    def transient_max_wait(self) -> float: ...


@dataclass
class Item:
    """One stream sequence of a batch, decoded."""

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


def decode_batch(msgs: Sequence[Msg], catalog: Catalog) -> list[Item]:
    """One item per stream sequence, in stream order; an undecodable event is kept as
    invalid (it goes to the DLQ), never raised."""
    by_seq: dict[int, Item] = {}
    for msg in msgs:
        info = delivery_info(msg)
        if info.stream_seq in by_seq:
            by_seq[info.stream_seq].copies.append(msg)
        else:
            by_seq[info.stream_seq] = _item(msg, info, catalog)
    return [by_seq[s] for s in sorted(by_seq)]


def _item(msg: Msg, info: Delivery, catalog: Catalog) -> Item:
    item = Item(msg, info.stream_seq, info.num_delivered, info.num_pending, info.consumer_seq)
    try:
        event = catalog.decode_message(msg.data, msg.headers)
        item.delivered = Delivered(event, item.seq, msg.subject, info.num_delivered)
    except EventValidationError as exc:
        item.invalid = str(exc)
    except Exception as exc:  # an upcaster's bug must not stall the consumer
        item.invalid = f"{type(exc).__name__}: {exc}"
    return item


async def ack_all(items: Sequence[Item]) -> None:
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


def owner_of(item: Item) -> tuple[str | None, str | None]:
    """Whose event a delivery is: the event's own ids, else the subject's last two tokens (an
    event that could not be read still rode on its user's subject)."""
    if item.delivered is not None:
        return item.delivered.event.tenant_id, item.delivered.event.user_id
    try:
        parsed = parse_subject(item.msg.subject)
    except ValueError:
        return None, None
    return parsed.tenant_id, parsed.user_id


class BatchApplier:
    """Applies batches of fresh items for one claim of a projection, and keeps its position.

    `claimed` loads a claim (epoch, checkpoint, emitted_seq); `apply` applies items above the
    checkpoint and moves it, or raises Rewind / Fenced with nothing of the failed part applied.
    Failed attempts per stream sequence survive rewinds (poison detection)."""

    def __init__(self, projection: Projection, pool: AsyncConnectionPool, js: JetStreamContext,
                 store: CheckpointStore, check_lock: Callable[[], Awaitable[None]],
                 settings: BatchSettings,
                 publisher: EventPublisher):
        self.projection = projection
        self.settings = settings
        self._pool = pool
        self._js = js
        self._store = store
        # called before every batch; raises Fenced when leadership is lost
        self._check_lock = check_lock
        self._publisher = publisher
        self._label = projection.name
        self.epoch = 0
        self.checkpoint = 0
        # Events up to this sequence already had their consequences published (before a
        # replay): rebuilding them must not publish those consequences again.
        self.emitted_seq = 0
        # failed apply attempts per stream sequence (poison detection survives rewinds)
        self.attempts: dict[int, int] = {}

    def claimed(self, claim: Claim) -> None:
        self.epoch, self.checkpoint, self.emitted_seq = (claim.epoch, claim.last_seq,
                                                         claim.emitted_seq)
        metrics.CHECKPOINT.labels(self._label).set(self.checkpoint)

    async def apply(self, items: list[Item], outcome: BatchOutcome) -> None:
        """Apply `items` (all above the checkpoint), retrying transient faults; raises unless
        all of them are applied or dead-lettered."""
        await self._check_lock()
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(is_transient),
                stop=stop_after_attempt(self.settings.transient_attempts),
                wait=wait_exponential(multiplier=0.2, max=self.settings.transient_max_wait),
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
            raise Rewind(self.settings.retry_delays[-1], f"transient faults: {exc!r}") from exc

    def _before_retry(self, items: list[Item]) -> Any:
        async def hook(_: Any) -> None:
            metrics.RETRIES.labels(self._label).inc()
            with contextlib.suppress(Exception):
                for item in items:
                    await item.msg.in_progress()

        return hook

    async def _apply(self, items: list[Item], outcome: BatchOutcome) -> None:
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
                    ctx = ApplyContext(suppress_through=self.emitted_seq)
                    await self.projection.apply_batch(
                        cur, [i.delivered for i in first if i.delivered], ctx
                    )
                    await self._publish(ctx)
                    await self._store.commit(cur, self._label, self.epoch, items[-1].seq)
        except Exception as exc:
            if is_transient(exc) or isinstance(exc, Fenced):
                raise
            log.warning(
                "batch apply failed; isolating the failing event",
                extra={"projection": self._label, "error": repr(exc)},
            )
            await self._apply_one_by_one(items, outcome)
            return
        self.checkpoint = items[-1].seq
        self._forget_attempts()
        metrics.CHECKPOINT.labels(self._label).set(self.checkpoint)
        metrics.APPLIED.labels(self._label).inc(len(first))
        if len(first) < len(valid):
            metrics.REPUBLISHED.labels(self._label).inc(len(valid) - len(first))
        outcome.applied += len(first)
        outcome.skipped += len(valid) - len(first)
        outcome.dead_lettered += len(invalid)

        await self._after_commit([i.delivered for i in first if i.delivered])

    async def _first_applications(self, cur: AsyncCursor[Any], items: list[Item]
                                  ) -> list[Item]:
        """The items whose event id this projection never applied: the others are copies
        re-published after the stream's duplicate window (or twice in this batch)."""
        keys: dict[tuple[str, str, str], AppliedKey] = {}
        for item in items:
            assert item.delivered is not None
            event = item.delivered.event
            ident = (event.tenant_id, event.user_id, event.event_id)
            if ident not in keys:
                keys[ident] = AppliedKey(*ident, item.seq)
        fresh = await self._store.claim_unapplied(cur, self._label, list(keys.values()))
        return [i for i in items if i.seq in fresh]

    async def _record_dead_letter(self, cur: AsyncCursor[Any], item: Item, reason: str,
                                  detail: str) -> None:
        tenant_id, user_id = owner_of(item)
        event_id = item.delivered.event.event_id if item.delivered else None
        await self._store.record_dead_letter(cur, self._label, item.seq, event_id, reason,
                                             detail, tenant_id, user_id)

    async def _apply_one_by_one(self, items: list[Item], outcome: BatchOutcome) -> None:
        """Slow path: a savepoint per event finds the one that fails; those before it commit.

        An event whose data can never be stored goes to the DLQ at once. Any other failing
        event is retried from the checkpoint (a rewind) until it has failed `max_deliver`
        times; then it goes to the DLQ and the events after it go on."""
        done: list[Item] = []
        held: list[Item] = []
        dead: list[tuple[Item, str]] = []
        applied: list[Item] = []
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor() as cur:
                for index, item in enumerate(items):
                    if item.delivered is None:
                        await self._record_dead_letter(cur, item, "invalid_event",
                                                       item.invalid or "")
                        done.append(item)  # already dead-lettered as invalid
                        continue
                    ctx = ApplyContext(suppress_through=self.emitted_seq)
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
                            raise Rewind(self.settings.retry_delays[-1],
                                         f"system fault at event {item.seq}: {exc!r}") from exc
                        attempts = self.attempts.get(item.seq, 0) + 1
                        self.attempts[item.seq] = attempts
                        if is_permanent(exc) or attempts >= self.settings.max_deliver:
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
                    await self._store.lock_epoch(cur, self._label, self.epoch)
                for item, reason in dead:
                    await self._dead_letter(item, "apply_failed", reason)
                    await self._record_dead_letter(cur, item, "apply_failed", reason)
                if done:
                    await self._store.commit(cur, self._label, self.epoch, done[-1].seq)
        if done:
            self.checkpoint = done[-1].seq
            metrics.CHECKPOINT.labels(self._label).set(self.checkpoint)
            metrics.APPLIED.labels(self._label).inc(len(applied))
            await self._after_commit([i.delivered for i in applied if i.delivered])
        outcome.applied += len(applied)
        outcome.dead_lettered += len(dead) + sum(1 for i in done if i.invalid is not None)
        self._forget_attempts()
        if held:
            outcome.returned += len(held)
            attempts = self.attempts[held[0].seq]
            raise Rewind(self._delay_for(attempts), f"event {held[0].seq} failed")

    def _forget_attempts(self) -> None:
        for seq in [s for s in self.attempts if s <= self.checkpoint]:
            del self.attempts[seq]

    async def _after_commit(self, delivered: list[Delivered]) -> None:
        if not delivered:
            return
        try:
            await self.projection.after_commit(delivered)
        except Exception:
            log.exception("after_commit failed", extra={"projection": self._label})

    async def _publish(self, ctx: ApplyContext) -> None:
        if not ctx.emitted:
            return
        results = await self._publisher.publish_many(ctx.emitted)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _dead_letter(self, item: Item, reason: str, detail: str) -> None:
        await send_to_dlq(
            self._js,
            DeadLetter(
                consumer=self.projection.durable,
                reason=reason,
                detail=detail,
                stream=self.projection.stream,
                seq=item.seq,
                subject=item.msg.subject,
                deliveries=max(item.num_delivered, self.attempts.get(item.seq, 0)),
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
        delays = self.settings.retry_delays
        return delays[min(max(attempts - 1, 0), len(delays) - 1)]
