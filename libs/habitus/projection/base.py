"""What a projection is: a deterministic fold of events into tables it owns.

A projection never reads the wall clock or another service's tables; everything it writes goes
through the cursor of the batch transaction, which also carries the checkpoint. Events it wants to
publish as a consequence are handed to `emit` and are published (and acknowledged by the stream)
before that transaction commits, with ids derived from their cause so a redelivery re-publishes
the same ids and the stream drops them.

What a projection reads is its handler table, `{PayloadType: handler}`: the event types, the
stream and the subject filters are all derived from it, so there is no second list to keep in
step and no dispatch on type names. A handler gets a run of consecutive events of its type (in
stream order), so one that can batch its writes does, and order across types is kept.
"""

from __future__ import annotations

import abc
import copy
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from psycopg import AsyncCursor, sql

from habitus.bus.streams import EVENTS, INGEST
from habitus.events import CATALOG, Event
from habitus.events.envelope import Payload
from habitus.projection.partitions import Partition, PartitionKey, filters
from habitus.subjects import (
    EVENT_ROOT,
    INGEST_ROOT,
    event_subject,
    ingest_subject,
    user_filter,
)


@dataclass(frozen=True, slots=True)
class Delivered:
    event: Event[Any]
    seq: int
    subject: str
    num_delivered: int
    #: when the stream stored it (epoch seconds), the same on every redelivery and replay:
    #: arrival order in time for folds that group by it (the extractor's windows)
    stored_at: float = 0.0


@dataclass
class ApplyContext:
    """What a projection hands back besides its writes: the events its batch causes. They are
    collected, not published on the spot, because the runner publishes them (and waits for the
    stream's acks) just before the batch commits, so a crash can lose neither the view's change
    nor its consequences, and a replay can skip consequences already published."""

    emitted: list[Event[Any]] = field(default_factory=list)
    #: consequences of events at or below this sequence were published before (replay)
    suppress_through: int = 0
    #: consequences skipped because they were published before (what a replay would re-emit)
    suppressed: list[Event[Any]] = field(default_factory=list)

    def emit(self, event: Event[Any], cause: Delivered) -> None:
        """Publish `event` as a consequence of `cause`, before the batch commits; skipped
        when replaying an event whose consequences were already published."""
        if cause.seq > self.suppress_through:
            self.emitted.append(event)
        else:
            self.suppressed.append(event)


#: a handler: the projection, the batch cursor, a run of events of one type, the context
Handler = Callable[[Any, AsyncCursor[Any], Sequence[Delivered], ApplyContext], Awaitable[None]]


def type_name(payload: type[Payload]) -> str:
    """The catalog's name for a payload class (a class outside the catalog is a bug)."""
    for spec in CATALOG:
        if spec.payload is payload:
            return str(spec.type)
    raise LookupError(f"{payload.__name__} is not in the event catalog")


def subject_for(event_type: str, tenant_id: str = "*", user_id: str = "*") -> str:
    """The filter on stored subjects carrying `event_type` for a tenant and user (wildcards
    allowed). For every tenant and user it is `<root>.<name>.>`, which also matches what a
    stream stored before it carried the partition tokens."""
    spec = CATALOG.spec(event_type)
    root, name = ((INGEST_ROOT, str(spec.kind)) if spec.stream == "ingest"
                  else (EVENT_ROOT, event_type))
    if tenant_id == "*" and user_id == "*":
        return f"{root}.{name}.>"
    return user_filter(root, name, tenant_id, user_id)


def published_subject(event_type: str, tenant_id: str, user_id: str) -> str:
    """The subject a publisher writes `event_type` of this tenant and user on (the streams
    store it with the partition tokens appended)."""
    spec = CATALOG.spec(event_type)
    if spec.stream == "ingest":
        return ingest_subject(str(spec.kind), tenant_id, user_id)
    return event_subject(event_type, tenant_id, user_id)


def runs(batch: Sequence[Delivered]) -> Iterator[list[Delivered]]:
    """Maximal runs of consecutive events of the same type, in order."""
    run: list[Delivered] = []
    for delivered in batch:
        if run and run[-1].event.type != delivered.event.type:
            yield run
            run = []
        run.append(delivered)
    if run:
        yield run


def durable_for(name: str) -> str:
    """The durable consumer of the projection called `name` (a projection's, whoever asks)."""
    return "proj_" + name.replace(".", "_").replace("-", "_")


class Projection(abc.ABC):
    """Subclasses set `name`, `schema`, `handlers` (and `emits`, `tables`); the rest derives."""

    #: unique name, e.g. "learning.cache"; the durable consumer and checkpoint row derive from it
    name: ClassVar[str]
    #: the Postgres schema of the owning service (holds the checkpoint row)
    schema: ClassVar[str]
    #: what it applies: payload type -> handler (functions of the class body)
    handlers: ClassVar[Mapping[type[Payload], Handler]]
    #: payload types it publishes as consequences (commands wait for their readers too)
    emits: ClassVar[tuple[type[Payload], ...]] = ()
    #: payload types its service publishes later from what this projection stored (a
    #: scheduler's), which this projection then reads again: what caused them waits in its
    #: queue twice, and the gateway's end-to-end lag counts that queue twice
    requeues: ClassVar[tuple[type[Payload], ...]] = ()
    #: tables it owns (schema-qualified), each with `tenant_id` and `user_id` columns: emptied
    #: by `habitus replay`, and a user's rows deleted when the user is erased
    tables: ClassVar[Sequence[str]] = ()
    #: which slot its partitions key on: "user" when it folds per-user state (one user's
    #: events must be seen in order), "tenant" when a fold reads or writes state a whole
    #: tenant shares (every event of the tenant must be seen in order)
    partition_by: ClassVar[PartitionKey] = "user"
    #: other tables of its schema it keeps users' rows in without folding events into them
    #: (bookkeeping beside a view, like the profile mirror's): `erase_user` deletes the user's
    #: rows from them too, and a test checks that every table with users is in `tables` or here
    also_holds: ClassVar[Sequence[str]] = ()

    # derived from `handlers` when the class is created
    consumes: ClassVar[tuple[str, ...]] = ()
    emitted_types: ClassVar[tuple[str, ...]] = ()
    requeued_types: ClassVar[tuple[str, ...]] = ()
    stream: ClassVar[str]
    filter_subjects: ClassVar[Sequence[str]] = ()
    _by_type: ClassVar[dict[str, Handler]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "handlers" not in cls.__dict__:
            return
        by_type = {type_name(payload): handler for payload, handler in cls.handlers.items()}
        if not by_type:
            raise TypeError(f"{cls.__name__}: an empty handler table reads nothing")
        streams = {CATALOG.spec(t).stream for t in by_type}
        if len(streams) != 1:
            raise TypeError(f"{cls.__name__} reads from {sorted(streams)}: one stream only")
        cls._by_type = by_type
        cls.consumes = tuple(by_type)
        cls.emitted_types = tuple(type_name(p) for p in cls.emits)
        cls.requeued_types = tuple(type_name(p) for p in cls.requeues)
        unread = set(cls.requeued_types) - set(by_type)
        if unread:
            raise TypeError(f"{cls.__name__} requeues {sorted(unread)} but does not read them")
        cls.stream = INGEST if streams == {"ingest"} else EVENTS
        cls.filter_subjects = cls.subjects()

    @classmethod
    def subjects(cls, tenant_id: str = "*", user_id: str = "*") -> list[str]:
        """The subject filters of what it reads, for every user or for one tenant or user."""
        return [subject_for(t, tenant_id, user_id) for t in cls.consumes]

    def partition_filters(self, partition: Partition) -> list[str]:
        """The subject filters of one of its partitions (its whole filters narrowed to the
        partition's slots; an instance with filters of its own, a test's, is narrowed too)."""
        return filters(self.filter_subjects, self.partition_by, partition)

    async def apply_batch(
        self, cur: AsyncCursor[Any], batch: Sequence[Delivered], ctx: ApplyContext
    ) -> None:
        """Hand each run of same-type events to its handler, in order."""
        for run in runs(batch):
            handler = self._by_type.get(run[0].event.type)
            if handler is not None:  # the filter lets nothing else through
                await handler(self, cur, run, ctx)
        await self.before_commit(cur, batch)

    def ahead(self, batch: Sequence[Delivered]) -> None:
        """Called with each batch as soon as it is decoded, while the batch before it is still
        being applied: a projection may start work on it that needs none of its state (the
        producers start reading its statements in another process), so that the work is done
        by the time the batch is applied. It must change nothing and may be wasted: a batch
        can be redelivered, decoded again and applied later, or never."""
        return None

    async def before_commit(self, cur: AsyncCursor[Any], batch: Sequence[Delivered]) -> None:
        """Work after the batch's writes, in its transaction (change marks and the like)."""
        return None

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        """Best-effort work once `batch` is committed (cache invalidation and the like).

        Never part of the fold: it may be skipped by a crash, so what it does must be
        recoverable without it (a cache that can go stale only until its TTL, ...)."""
        return None

    async def erase_user(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> None:
        """Delete every row of the user from the tables it owns and those it also holds, in
        the erasure's transaction.

        A projection whose tables hold the user elsewhere than in `tenant_id`/`user_id`
        overrides this; the contract test proves nothing of the user is left."""
        for table in (*self.tables, *self.also_holds):
            await cur.execute(
                sql.SQL("DELETE FROM {} WHERE tenant_id = %s AND user_id = %s").format(
                    sql.Identifier(*table.split("."))),
                (tenant_id, user_id))

    async def after_erase(self, users: Mapping[tuple[str, str], int], *, committed: bool
                          ) -> None:
        """Delete what the projection keeps outside its tables (caches, files) for erased
        users (each with the sequence of its erasure). Called twice: inside the erasure's
        transaction (`committed=False`: before the erasure is reported done; a cache should
        also mark the users changed at that sequence, so what a read racing the erasure puts
        back from the rows being deleted is never served) and once it committed. Idempotent."""
        return None

    @property
    def durable(self) -> str:
        return durable_for(self.name)

    def clone(self) -> Projection:
        """Another instance for another partition of this projection in the same process.

        Handlers keep per-batch working state on the instance (a batch's open windows, its
        render counts) across awaits, so two partitions applying batches at once must not
        share one instance. The clone shares what was injected (caches, clients, models) and
        gets its own copy of every list, dict, set and counter."""
        twin = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, list | dict | set | Counter):
                setattr(twin, name, copy.copy(value))
        return twin
