"""Running one projection, scoped to a few tenants, against the real bus and database.

A scoped projection is an ordinary instance of the service's class with two instance
attributes overridden: `name` (so its checkpoint row, applied ids, dead letters, durable
consumer and advisory lock are its own) and `filter_subjects` (the class's subjects for the
test's tenants only, so it never sees another test's events). Nothing of the class changes,
so what runs is what the service runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg import sql

from habitus.bus.publisher import EventPublisher, headers_for
from habitus.bus.streams import DLQ, EVENTS, stream_for
from habitus.events import CATALOG, Event
from habitus.projection import ApplyContext, Delivered, Projection, ProjectionRunner, RunnerConfig
from habitus.projection.base import published_subject, subject_for
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.erasure import ErasureProjection
from habitus.service.projections import available, resolve

FAST = RunnerConfig(
    batch_size=500,
    fetch_timeout=0.1,
    ack_wait=5.0,
    max_deliver=3,
    retry_delays=(0.05, 0.1, 0.2),
    transient_attempts=3,
    transient_max_wait=0.2,
    standby_poll=0.1,
    graceful_timeout=10.0,
)

#: a table snapshot: {table: [row as {column: value}, ...]} in a total order
Snapshot = dict[str, list[dict[str, Any]]]


def instantiate(cls: type[Projection], siblings: Sequence[Projection] | None = None
                ) -> Projection:
    """An instance as `habitus replay` would make it: `resolve(name)` for an installed
    projection, `cls()` for the example service's, an erasure over fresh siblings (or over
    `siblings`, when the test needs its scoped instance among them)."""
    if issubclass(cls, ErasureProjection):
        return cls(list(siblings) if siblings is not None else [s() for s in cls.erases])
    if cls.name in available():
        made = resolve(cls.name)
        assert type(made) is cls
        return made
    return cls()


def scope(projection: Projection, tenants: Iterable[str]) -> Projection:
    """Give `projection` its own name and only the subjects of `tenants` (on the instance)."""
    cls = type(projection)
    projection.name = f"contract.{cls.name}.{uuid.uuid4().hex[:10]}"  # type: ignore[misc]
    projection.filter_subjects = [s for t in tenants for s in cls.subjects(t)]  # type: ignore[misc]
    return projection


@dataclass
class Scoped:
    """A scoped projection, what it handed to the runner to publish, and how to run it."""

    projection: Projection
    tenants: tuple[str, ...]
    emitted: list[Event[Any]] = field(default_factory=list)

    @classmethod
    def of(cls, projection: Projection, *tenants: str) -> Scoped:
        scoped = cls(scope(projection, tenants), tenants)
        original = projection.apply_batch

        async def recording(cur: Any, batch: Sequence[Delivered], ctx: ApplyContext) -> None:
            await original(cur, batch, ctx)
            scoped.emitted.extend([*ctx.emitted, *ctx.suppressed])

        projection.apply_batch = recording  # type: ignore[method-assign]
        return scoped

    @property
    def name(self) -> str:
        return self.projection.name

    @property
    def schema(self) -> str:
        return self.projection.schema

    async def run(self, nc: Any, pool: Any, batch_size: int = 500) -> ProjectionRunner:
        runner = ProjectionRunner(self.projection, nc, pool,
                                  config=replace(FAST, batch_size=batch_size))
        await runner.run_until_caught_up(timeout=60)
        return runner

    async def last_seq(self, pool: Any) -> int | None:
        async with pool.connection() as conn:
            return await CheckpointStore(self.schema).last_seq(conn, self.name)


# ---------------------------------------------------------------------- publishing


async def publish(nc: Any, events: Sequence[Event[Any]]) -> list[int]:
    """Publish as producers do (the event id is the Nats-Msg-Id); the stream sequences."""
    publisher = EventPublisher(nc.jetstream())
    seqs = []
    for event in events:  # one by one: the order is the stream's order
        result = await publisher.publish(event)
        assert not result.duplicate, event
        seqs.append(result.seq)
    return seqs


async def republish_past_window(nc: Any, event: Event[Any]) -> int:
    """Store `event` again as the stream would once its duplicate window has passed: the same
    event (same id), under a Nats-Msg-Id the stream has not seen."""
    headers = headers_for(event) | {"Nats-Msg-Id": f"late-{uuid.uuid4().hex}"}
    ack = await nc.jetstream().publish(CATALOG.subject(event), event.to_json(),
                                       stream=stream_for(CATALOG.spec(event.type).stream),
                                       headers=headers)
    assert not ack.duplicate
    return int(ack.seq)


async def publish_poison(nc: Any, projection: Projection, tenant: str, user: str) -> int:
    """Bytes that are no event, on the first subject the projection reads, for `tenant`."""
    subject = published_subject(type(projection).consumes[0], tenant, user)
    ack = await nc.jetstream().publish(
        subject, b'{"this is": "not an event", "\xff": 1', stream=projection.stream,
        headers={"Nats-Msg-Id": f"poison-{uuid.uuid4().hex}"})
    return int(ack.seq)


# ---------------------------------------------------------------------- reading


async def messages(nc: Any, stream: str, subjects: Iterable[str]) -> list[Any]:
    """Every message now stored on `subjects` (ephemeral consumers; the count is asked
    first, so no read waits for a timeout)."""
    js = nc.jetstream()
    out: list[Any] = []
    for subject in subjects:
        info = await js.stream_info(stream, subjects_filter=subject)
        expected = sum((info.state.subjects or {}).values())
        if not expected:
            continue
        sub = await js.pull_subscribe(subject, stream=stream)
        got: list[Any] = []
        try:
            while len(got) < expected:
                batch = await sub.fetch(expected - len(got), timeout=5)
                for msg in batch:
                    await msg.ack()
                got.extend(batch)
        finally:
            await sub.unsubscribe()
        out.extend(got)
    return sorted(out, key=lambda m: m.metadata.sequence.stream)


async def emitted_on_stream(nc: Any, projection: Projection, tenant: str
                            ) -> list[tuple[str, str]]:
    """(type, event id) of every stored message of the types the projection emits, for
    `tenant`, in stream order (copies included: a second copy is a bug)."""
    cls = type(projection)
    found = await messages(nc, EVENTS, [subject_for(t, tenant) for t in cls.emitted_types])
    return [(e.type, e.event_id) for e in (CATALOG.decode(m.data) for m in found)]


async def dead_letters_on_stream(nc: Any, projection: Projection) -> list[Any]:
    return await messages(nc, DLQ, [f"habitus.v1.dlq.{projection.durable}.>"])


async def snapshot(pool: Any, projection: Projection, tenant: str,
                   user: str | None = None) -> Snapshot:
    """Every row of the projection's tables for `tenant` (and `user`), all columns, ordered
    by all columns. No column is excluded: none of these tables has a wall-clock default
    (the `updated_at`/`dead_at` columns live in the checkpoint and dead-letter tables, which
    are not the projection's)."""
    out: Snapshot = {}
    async with pool.connection() as conn:
        for table in projection.tables:
            where = sql.SQL("tenant_id = %s") + (
                sql.SQL(" AND user_id = %s") if user is not None else sql.SQL(""))
            cur = await conn.execute(sql.SQL("SELECT * FROM {} WHERE {} LIMIT 0").format(
                sql.Identifier(*table.split(".")), where),
                (tenant,) if user is None else (tenant, user))
            n = len(cur.description or ())
            order = sql.SQL(", ").join(sql.Literal(i) for i in range(1, n + 1))
            cur = await conn.execute(sql.SQL("SELECT * FROM {} WHERE {} ORDER BY {}").format(
                sql.Identifier(*table.split(".")), where, order),
                (tenant,) if user is None else (tenant, user))
            columns = [c.name for c in cur.description or ()]
            out[table] = [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]
    return out


def row_counts(snap: Snapshot) -> dict[str, int]:
    return {table: len(rows) for table, rows in snap.items()}


async def applied_count(pool: Any, schema: str, tenant: str, user: str,
                        projection: str | None = None) -> int:
    store = CheckpointStore(schema)
    query = f"SELECT count(*) FROM {store.applied} WHERE tenant_id = %s AND user_id = %s"
    params: tuple[str, ...] = (tenant, user)
    if projection is not None:
        query += " AND projection = %s"
        params += (projection,)
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def erase_tenant(pool: Any, projection: Projection, tenant: str,
                       users: Iterable[str]) -> None:
    """Delete the tenant's rows the way erasure does: `erase_user` per user, one
    transaction."""
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        for user in users:
            await projection.erase_user(cur, tenant, user)


async def reset_for_replay(pool: Any, scoped: Scoped) -> None:
    """Start the scoped projection again from sequence 1 (`CheckpointStore.reset`: checkpoint
    0, its applied ids and dead letters forgotten, epoch bumped) with its consequences to be
    published again (`republish`), with the same ids: the stream's duplicate window must drop
    them."""
    store = CheckpointStore(scoped.schema)
    async with pool.connection() as conn, conn.transaction():
        await store.reset(conn, scoped.name, republish=True)
