"""What a projection is: a deterministic fold of events into tables it owns.

A projection never reads the wall clock or another service's tables; everything it writes goes
through the cursor of the batch transaction, which also carries the checkpoint. Events it wants to
publish as a consequence are handed to `emit` and are published (and acknowledged by the stream)
before that transaction commits, with ids derived from their cause so a redelivery re-publishes
the same ids and the stream drops them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncCursor

from habitus.events import Event


@dataclass(frozen=True, slots=True)
class Delivered:
    event: Event[Any]
    seq: int
    subject: str
    num_delivered: int


@dataclass
class ApplyContext:
    """What a projection hands back besides its writes: the events its batch causes. They are
    collected, not published on the spot, because the runner publishes them (and waits for the
    stream's acks) just before the batch commits, so a crash can lose neither the view's change
    nor its consequences, and a replay can skip consequences already published."""

    emitted: list[Event[Any]] = field(default_factory=list)
    #: consequences of events at or below this sequence were published before (replay)
    suppress_through: int = 0

    def emit(self, event: Event[Any], cause: Delivered) -> None:
        """Publish `event` as a consequence of `cause`, before the batch commits; skipped
        when replaying an event whose consequences were already published."""
        if cause.seq > self.suppress_through:
            self.emitted.append(event)


class Projection(abc.ABC):
    #: unique name, e.g. "learning.evidence"; the durable consumer is derived from it
    name: str
    #: the Postgres schema of the owning service (holds the checkpoint row)
    schema: str
    #: "HABITUS_EVENTS" or "HABITUS_INGEST"
    stream: str
    #: subject filters within the stream
    filter_subjects: Sequence[str]
    #: tables emptied by `habitus replay` before rebuilding from sequence 1
    tables: Sequence[str] = ()

    async def apply_batch(
        self, cur: AsyncCursor[Any], batch: Sequence[Delivered], ctx: ApplyContext
    ) -> None:
        """Apply events in order. Override to batch writes (executemany/COPY)."""
        for delivered in batch:
            await self.apply(cur, delivered, ctx)

    async def apply(self, cur: AsyncCursor[Any], delivered: Delivered, ctx: ApplyContext
                    ) -> None:
        raise NotImplementedError

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        """Best-effort work once `batch` is committed (cache invalidation and the like).

        Never part of the fold: it may be skipped by a crash, so what it does must be
        recoverable without it (a cache that can go stale only until its TTL, ...)."""
        return None

    @property
    def durable(self) -> str:
        return "proj_" + self.name.replace(".", "_").replace("-", "_")
