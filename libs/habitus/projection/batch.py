"""Applying one batch of deliveries: exactly once, in order, poison isolated.

`BatchApplier` orchestrates one batch's transaction; each of its concerns lives in a module of
its own, with the guarantee it keeps:

* decoding deliveries into items, copies of one sequence: `habitus.projection.decode`;
* an event id applies once, ever: `habitus.projection.dedup`;
* consequences with the change: `habitus.projection.consequences`;
* poison isolation, one event at a time: `habitus.projection.isolation`;
* dead letters, to HABITUS_DLQ and beside the checkpoint: `habitus.projection.dead_letters`;
* ack-all: `habitus.projection.acks`.

What the transaction itself guarantees:

* **Exactly-once effects.** A batch is applied inside one Postgres transaction that also moves
  the projection's checkpoint (the stream sequence), fenced by the claim's epoch. Deliveries at
  or below the checkpoint are acknowledged without being applied (the runner sorts those out),
  so a redelivery after a crash between commit and ack changes nothing.
* **No loss.** Nothing is acknowledged before its transaction committed. Transient faults are
  retried with backoff; if they persist the batch is given up as a whole (`Rewind`) and the
  runner starts again from its checkpoint. Nothing is dropped or counted as poison.
* **Poison goes the slow path.** When a batch fails for any other reason, nothing of it is
  applied and it is applied again one event at a time (`PoisonIsolation`); failed attempts per
  stream sequence survive rewinds, so an event that keeps failing is eventually given up on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from nats.js import JetStreamContext
from psycopg_pool import AsyncConnectionPool
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from habitus.bus.publisher import EventPublisher
from habitus.projection.acks import ack_all
from habitus.projection.base import ApplyContext, Projection
from habitus.projection.checkpoints import CheckpointStore, Claim
from habitus.projection.consequences import after_commit, publish_emitted
from habitus.projection.dead_letters import DeadLetters
from habitus.projection.decode import Item, decode_batch, owner_of
from habitus.projection.dedup import first_applications
from habitus.projection.faults import Fenced, Rewind, is_transient
from habitus.projection.isolation import IsolationSettings, PoisonIsolation, retry_delay
from habitus.projection.outcome import BatchOutcome
from habitus.projection.partitions import WHOLE, Partition
from habitus.telemetry import metrics

__all__ = [
    "BatchApplier",
    "BatchSettings",
    "Item",
    "ack_all",
    "decode_batch",
    "owner_of",
]

log = logging.getLogger(__name__)


class BatchSettings(IsolationSettings, Protocol):
    """The part of RunnerConfig a batch reads."""

    @property
    def transient_attempts(self) -> int: ...
    @property
    def transient_max_wait(self) -> float: ...
    @property
    def key_wait_seconds(self) -> float: ...


class BatchApplier:
    """Applies batches of fresh items for one claim of a projection, and keeps its position.

    `claimed` loads a claim (epoch, checkpoint, emitted_seq); `apply` applies items above the
    checkpoint and moves it, or raises Rewind / Fenced with nothing of the failed part applied.
    Failed attempts per stream sequence survive rewinds (poison detection)."""

    def __init__(self, projection: Projection, pool: AsyncConnectionPool, js: JetStreamContext,
                 store: CheckpointStore, check_lock: Callable[[], Awaitable[None]],
                 settings: BatchSettings,
                 publisher: EventPublisher, partition: Partition = WHOLE):
        self.projection = projection
        self.partition = partition
        self._part = partition.label
        self.settings = settings
        self._pool = pool
        self._store = store
        # called before every batch; raises Fenced when leadership is lost
        self._check_lock = check_lock
        self._publisher = publisher
        self._label = projection.name
        self._dead_letters = DeadLetters(projection, js, store)
        self._isolation = PoisonIsolation(projection, pool, store, settings,
                                          self._dead_letters, publisher, partition)
        self.epoch = 0
        self.checkpoint = 0
        # Events up to this sequence already had their consequences published (before a
        # replay): rebuilding them must not publish those consequences again.
        self.emitted_seq = 0
        # since when (time.monotonic) the event at a sequence waits for a key it cannot read
        self.key_waits: dict[int, float] = {}
        # failed apply attempts per stream sequence (poison detection survives rewinds)
        self.attempts: dict[int, int] = {}

    def claimed(self, claim: Claim) -> None:
        self.epoch, self.checkpoint, self.emitted_seq = (claim.epoch, claim.last_seq,
                                                         claim.emitted_seq)
        metrics.CHECKPOINT.labels(self._label, self._part).set(self.checkpoint)

    async def apply(self, items: list[Item], outcome: BatchOutcome) -> None:
        """Apply `items` (all above the checkpoint), retrying transient faults; raises unless
        all of them are applied or dead-lettered."""
        blocked = next((n for n, item in enumerate(items) if item.unavailable is not None),
                       None)
        if blocked is not None:
            # a key this process cannot find: apply what comes before, then wait for it (a
            # system fault, not counted against the event), up to `key_wait_seconds`: a key
            # lost for good, or a body naming a key that is not its user's, must not stop the
            # partition forever, so it then goes to the DLQ (`habitus dlq replay` once fixed)
            held = items[blocked]
            since = self.key_waits.setdefault(held.seq, time.monotonic())
            if time.monotonic() - since >= self.settings.key_wait_seconds:
                held.invalid = (f"its data key could not be read for "
                                f"{self.settings.key_wait_seconds:g} s: {held.unavailable}")
                held.unavailable = None
                del self.key_waits[held.seq]
                await self.apply(items, outcome)
                return
            if blocked:
                await self.apply(items[:blocked], outcome)
            outcome.returned += len(items) - blocked
            metrics.KEYS_UNAVAILABLE.labels(self._label).inc()
            raise Rewind(self.settings.retry_delays[-1], f"event {held.seq}: {held.unavailable}")
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
            await self._dead_letters.send(item, "invalid_event", item.invalid or "",
                                          self.attempts.get(item.seq, 0))
        try:
            async with self._pool.connection() as conn, conn.transaction():
                async with conn.cursor() as cur:
                    for item in invalid:
                        await self._dead_letters.record(cur, item, "invalid_event",
                                                        item.invalid or "")
                    first = await first_applications(self._store, cur, self._label, valid)
                    ctx = ApplyContext(suppress_through=self.emitted_seq)
                    await self.projection.apply_batch(
                        cur, [i.delivered for i in first if i.delivered], ctx
                    )
                    await publish_emitted(self._publisher, ctx)
                    await self._store.commit(cur, self._label, self.epoch, items[-1].seq,
                                             partition=self.partition)
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
        metrics.CHECKPOINT.labels(self._label, self._part).set(self.checkpoint)
        metrics.APPLIED.labels(self._label).inc(len(first))
        if len(first) < len(valid):
            metrics.REPUBLISHED.labels(self._label).inc(len(valid) - len(first))
        outcome.applied += len(first)
        outcome.skipped += len(valid) - len(first) + sum(1 for i in items if i.shredded)
        outcome.dead_lettered += len(invalid)

        await after_commit(self.projection, [i.delivered for i in first if i.delivered])

    async def _apply_one_by_one(self, items: list[Item], outcome: BatchOutcome) -> None:
        """Slow path (see `habitus.projection.isolation`): commit the events before the one
        that fails, then move the checkpoint past them; rewind to retry the one held."""
        isolated = await self._isolation.isolate(items, outcome, epoch=self.epoch,
                                                 emitted_seq=self.emitted_seq,
                                                 attempts=self.attempts)
        done, applied, held = isolated.done, isolated.applied, isolated.held
        if done:
            self.checkpoint = done[-1].seq
            metrics.CHECKPOINT.labels(self._label, self._part).set(self.checkpoint)
            metrics.APPLIED.labels(self._label).inc(len(applied))
            await after_commit(self.projection, [i.delivered for i in applied if i.delivered])
        outcome.applied += len(applied)
        outcome.dead_lettered += (len(isolated.dead)
                                  + sum(1 for i in done if i.invalid is not None))
        self._forget_attempts()
        if held:
            outcome.returned += len(held)
            attempts = self.attempts[held[0].seq]
            raise Rewind(self._delay_for(attempts), f"event {held[0].seq} failed")

    def _forget_attempts(self) -> None:
        for seq in [s for s in self.attempts if s <= self.checkpoint]:
            del self.attempts[seq]
        # an event whose key came back and applied: a later wait for it starts afresh
        for seq in [s for s in self.key_waits if s <= self.checkpoint]:
            del self.key_waits[seq]

    def _delay_for(self, attempts: int) -> float:
        return retry_delay(self.settings.retry_delays, attempts)
