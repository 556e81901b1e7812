"""Poison isolation: when a batch fails, finding the one event that fails, one by one.

* **Poison is isolated.** A savepoint per event finds the one that fails; those before it
  commit. An event that fails validation, or whose data the database can never store, goes to
  HABITUS_DLQ at once, so one tenant's bad data never holds up another's; one whose apply keeps
  raising otherwise is retried (by rewinds, after `retry_delay`) until it failed `max_deliver`
  times and then goes to the DLQ. Events after it wait, so a user's order is kept.
* **Fenced runners dead-letter nothing.** Before dead-lettering, the checkpoint row is locked
  and the claim's epoch checked: a runner fenced since must not dead-letter an event its
  successor applies.
* **System faults are not poison.** A failure that is not about the event (see
  `habitus.projection.faults.is_about_the_event`) rewinds without counting against the event;
  a transient one is raised for the batch's retries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from habitus.bus.publisher import EventPublisher
from habitus.projection.base import ApplyContext, Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.consequences import publish_emitted
from habitus.projection.dead_letters import DeadLetters
from habitus.projection.decode import Item
from habitus.projection.dedup import first_applications
from habitus.projection.faults import Rewind, is_about_the_event, is_permanent, is_transient
from habitus.projection.outcome import BatchOutcome
from habitus.projection.partitions import WHOLE, Partition

log = logging.getLogger(__name__)


class IsolationSettings(Protocol):
    """The part of RunnerConfig poison isolation reads."""

    @property
    def max_deliver(self) -> int: ...
    @property
    def retry_delays(self) -> Sequence[float]: ...


def retry_delay(delays: Sequence[float], attempts: int) -> float:
    """The pause before an event that failed `attempts` times is tried again."""
    return delays[min(max(attempts - 1, 0), len(delays) - 1)]


@dataclass
class Isolated:
    """What one pass committed: `done` moved the checkpoint (applied, skipped copies, dead
    letters); `held` failed at its first item and waits for a rewind."""

    done: list[Item] = field(default_factory=list)
    applied: list[Item] = field(default_factory=list)
    dead: list[tuple[Item, str]] = field(default_factory=list)
    held: list[Item] = field(default_factory=list)


class PoisonIsolation:
    """The slow path of one projection's batches."""

    def __init__(self, projection: Projection, pool: AsyncConnectionPool,
                 store: CheckpointStore, settings: IsolationSettings,
                 dead_letters: DeadLetters, publisher: EventPublisher,
                 partition: Partition = WHOLE):
        self.projection = projection
        self.partition = partition
        self.settings = settings
        self._pool = pool
        self._store = store
        self._dead_letters = dead_letters
        self._publisher = publisher
        self._label = projection.name

    async def isolate(self, items: list[Item], outcome: BatchOutcome, *, epoch: int,
                      emitted_seq: int, attempts: dict[int, int]) -> Isolated:
        """Apply `items` one by one, each under a savepoint, and commit those up to the first
        that fails (and is not given up on); `attempts` (failed applies per stream sequence)
        is updated. Raises Rewind on a system fault, with nothing of the batch applied."""
        result = Isolated()
        done, applied, dead = result.done, result.applied, result.dead
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor() as cur:
                for index, item in enumerate(items):
                    if item.shredded:
                        done.append(item)  # its user was erased: nothing to apply
                        outcome.skipped += 1
                        continue
                    if item.delivered is None:
                        await self._dead_letters.record(cur, item, "invalid_event",
                                                        item.invalid or "")
                        done.append(item)  # already dead-lettered as invalid
                        continue
                    ctx = ApplyContext(suppress_through=emitted_seq)
                    try:
                        async with conn.transaction():  # SAVEPOINT
                            if not await first_applications(self._store, cur, self._label,
                                                            [item]):
                                done.append(item)  # a re-published copy
                                outcome.skipped += 1
                                continue
                            await self.projection.apply_batch(cur, [item.delivered], ctx)
                            await publish_emitted(self._publisher, ctx)
                    except Exception as exc:
                        if is_transient(exc):
                            raise
                        if not is_about_the_event(exc):
                            raise Rewind(self.settings.retry_delays[-1],
                                         f"system fault at event {item.seq}: {exc!r}") from exc
                        failed = attempts.get(item.seq, 0) + 1
                        attempts[item.seq] = failed
                        if is_permanent(exc) or failed >= self.settings.max_deliver:
                            dead.append((item, f"{type(exc).__name__}: {exc}"))
                            done.append(item)
                            continue
                        log.warning(
                            "event apply failed; will retry",
                            extra={"projection": self._label, "seq": item.seq,
                                   "attempts": failed, "error": repr(exc)},
                        )
                        outcome.errors.append(repr(exc))
                        result.held = items[index:]
                        break
                    done.append(item)
                    applied.append(item)
                if dead:
                    # Hold the checkpoint row (and check the epoch) first: a runner fenced
                    # since must not dead-letter an event its successor applies.
                    await self._store.lock_epoch(cur, self._label, epoch,
                                                 partition=self.partition)
                for item, reason in dead:
                    await self._dead_letters.send(item, "apply_failed", reason,
                                                  attempts.get(item.seq, 0))
                    await self._dead_letters.record(cur, item, "apply_failed", reason)
                if done:
                    await self._store.commit(cur, self._label, epoch, done[-1].seq,
                                             partition=self.partition)
        return result
