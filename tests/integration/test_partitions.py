"""Partitioned projections against the real NATS and Postgres.

* The slots the streams store are NATS's own partitioning, and `slot_of` (and the learning
  cache's SQL `slot_of`) compute the same ones.
* A projection split four ways applies what one runner applies: every event once, each user's
  in stream order, whatever the interleaving of the partitions.
* A repartition while events keep arriving (1 -> 4 -> 2) drains the old partitions up to the
  cutover and starts the new ones after it: nothing lost, nothing applied twice, each user's
  events in order across the change.
* Two replicas (memberships) share the partitions; when one leaves, the other takes them all.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from psycopg import AsyncCursor

from habitus.bus.streams import INGEST, PARTITIONED_FROM
from habitus.db.urls import conninfo
from habitus.projection import ApplyContext, Delivered, ProjectionRunner
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.partitions import layout
from habitus.projection.wait import wait_applied
from habitus.service.membership import Membership
from habitus.subjects import ingest_subject, parse_subject, slot_of, tenant_slot_of
from tests.conftest import ServerUrls
from tests.integration.runner_support import FAST, eventually, publish
from tests.support.factories import turn, unique
from tests.support.tally import TallyProjection

pytestmark = pytest.mark.asyncio


class OrderedTally(TallyProjection):
    """A tally that also logs the order it applied each event in, so a user's events applied
    out of stream order show."""

    def ddl(self) -> list[str]:
        return [*super().ddl(), f"""CREATE TABLE IF NOT EXISTS {self.schema}.applied_order (
            n bigserial PRIMARY KEY, user_id text NOT NULL, seq bigint NOT NULL)"""]

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        await super().apply_batch(cur, batch, ctx)
        await cur.executemany(
            f"INSERT INTO {self.schema}.applied_order (user_id, seq) VALUES (%s, %s)",
            [(d.event.user_id, d.seq) for d in batch])


async def ordered_tally(pool: Any) -> tuple[OrderedTally, str]:
    tenant = unique("t")
    projection = OrderedTally(unique("ptally"), tenant)
    async with pool.connection() as conn:
        for stmt in projection.ddl():
            await conn.execute(stmt)
        await conn.commit()
    return projection, tenant


async def applied(pool: Any, projection: OrderedTally) -> dict[str, list[int]]:
    """Each user's applied sequences, in the order they were applied."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT user_id, seq FROM {projection.schema}.applied_order ORDER BY n")
        out: dict[str, list[int]] = defaultdict(list)
        for user, seq in await cur.fetchall():
            out[user].append(int(seq))
        return dict(out)


def expected(events: list[Any], seqs: list[int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for event, seq in zip(events, seqs, strict=True):
        out[event.user_id].append(seq)
    return dict(out)


async def run_partitions(projection: TallyProjection, nc: Any, pool: Any, count: int,
                         timeout: float = 60) -> list[ProjectionRunner]:
    runners = [ProjectionRunner(projection.clone(), nc, pool, config=FAST, partition=p)
               for p in layout(count)]
    await asyncio.gather(*(r.run_until_caught_up(timeout=timeout) for r in runners))
    return runners


# ---------------------------------------------------------------------- the wire


async def test_the_stored_slots_are_the_servers_partitioning_and_ours(nc: Any, pool: Any,
                                                                       settings: Any) -> None:
    js = nc.jetstream()
    info = await js.stream_info(INGEST)
    assert info.config.subject_transform is not None
    assert (info.config.metadata or {}).get(PARTITIONED_FROM) == "1"
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
    pairs = [("".join(rng.choices(alphabet, k=rng.randint(1, 20))),
              "".join(rng.choices(alphabet, k=rng.randint(1, 64)))) for _ in range(300)]
    for tenant, user in pairs:
        ack = await js.publish(ingest_subject("SlotProbe", tenant, user), b"{}")
        stored = parse_subject(str((await js.get_msg(INGEST, ack.seq)).subject))
        assert (stored.tenant_id, stored.user_id) == (tenant, user)
        assert (stored.user_slot, stored.tenant_slot) == (slot_of(tenant, user),
                                                          tenant_slot_of(tenant)), (tenant, user)
        await js.delete_msg(INGEST, ack.seq)
    # the learning cache's SQL twin, which keeps each user's slot on its row
    from habitus.service.migrations import migrate
    migrate(settings.database_url, only=["learning"])
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT t, u, learning.slot_of(t, u) FROM unnest(%s::text[], %s::text[]) AS x(t, u)",
            ([t for t, _ in pairs], [u for _, u in pairs]))
        for tenant, user, slot in await cur.fetchall():
            assert slot == slot_of(tenant, user)


# ---------------------------------------------------------------------- partitioned runners


async def test_four_partitions_apply_what_one_runner_does_in_each_users_order(
        nc: Any, pool: Any) -> None:
    split, tenant = await ordered_tally(pool)
    whole = OrderedTally(unique("ptally"), tenant)
    async with pool.connection() as conn:
        for stmt in whole.ddl():
            await conn.execute(stmt)
        await conn.commit()
    events = [turn(tenant, f"u{i % 23}") for i in range(1_200)]
    seqs = [r.seq for r in await publish(nc, events)]

    runners = await run_partitions(split, nc, pool, 4)
    await ProjectionRunner(whole, nc, pool, config=FAST).run_until_caught_up(timeout=60)

    assert await applied(pool, split) == expected(events, seqs) == await applied(pool, whole)
    # each user in exactly one partition, every partition with work of its own
    by_partition = {r.partition: {e.user_id for e in events
                                  if r.partition.covers(slot_of(tenant, e.user_id))}
                    for r in runners}
    assert sum(len(users) for users in by_partition.values()) == 23
    async with pool.connection() as conn:
        rows = await CheckpointStore(split.schema).layout(conn, split.name)
    assert [r.partition for r in rows] == layout(4)
    # read-your-writes per user: the partition holding the user has applied its last event
    for user in ("u0", "u7"):
        last = max(s for e, s in zip(events, seqs, strict=True) if e.user_id == user)
        assert await wait_applied(pool, split.schema, split.name, last, timeout=1,
                                  slot=slot_of(tenant, user))


async def test_a_layout_is_made_once_and_a_runner_of_another_count_is_refused(
        nc: Any, pool: Any) -> None:
    projection, tenant = await ordered_tally(pool)
    await publish(nc, [turn(tenant, "u1")])
    await run_partitions(projection, nc, pool, 2)
    stranger = ProjectionRunner(projection, nc, pool, config=FAST)  # the whole of it
    task = stranger.start()
    await asyncio.wait_for(stranger.gone.wait(), 10)  # its partition is not in the layout
    await task
    async with pool.connection() as conn:
        rows = await CheckpointStore(projection.schema).layout(conn, projection.name)
    assert [r.partition for r in rows] == layout(2)


async def test_a_repartition_under_load_loses_nothing_and_keeps_each_users_order(
        nc: Any, pool: Any) -> None:
    projection, tenant = await ordered_tally(pool)
    store = CheckpointStore(projection.schema)
    js = nc.jetstream()
    all_events: list[Any] = []
    all_seqs: list[int] = []
    stop = asyncio.Event()

    async def keep_publishing() -> None:
        i = 0
        while not stop.is_set():
            batch = [turn(tenant, f"u{(i + k) % 17}") for k in range(40)]
            i += 40
            results = await publish(nc, batch)
            all_events.extend(batch)
            all_seqs.extend(r.seq for r in results)
            await asyncio.sleep(0.01)

    async def repartition(count: int) -> None:
        cutover = int((await js.stream_info(INGEST)).state.last_seq or 0)
        async with pool.connection() as conn, conn.transaction():
            await store.repartition(conn, projection.name, count, cutover)

    publisher = asyncio.create_task(keep_publishing())
    config = replace(FAST, batch_size=50)
    live: list[ProjectionRunner] = []

    def start(count: int) -> None:
        for p in layout(count):
            runner = ProjectionRunner(projection.clone(), nc, pool, config=config, partition=p)
            runner.start()
            live.append(runner)

    try:
        start(1)
        await asyncio.sleep(1.0)
        await repartition(4)
        start(4)  # they wait (pending) until the one partition drained
        await asyncio.sleep(1.5)
        await repartition(2)
        start(2)
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await publisher

    async def settled() -> bool:
        async with pool.connection() as conn:
            rows = await store.layout(conn, projection.name)
        return ([r.partition for r in rows] == layout(2)
                and all(r.state == "active" for r in rows)
                and await applied(pool, projection) == expected(all_events, all_seqs))

    await eventually(settled, timeout=60)
    for runner in live:
        await runner.stop()
    # the old layouts' runners ended with their partitions, their consumers gone
    assert all(r.gone.is_set() for r in live if r.partition.count != 2)
    names = {c.name for c in await js.consumers_info(INGEST)}
    assert not any(n.startswith(projection.durable + "__p") and n.endswith(("of4", "of1"))
                   for n in names)
    assert projection.durable not in names


async def test_repartitioning_twice_at_once_is_refused(pool: Any, nc: Any) -> None:
    projection, tenant = await ordered_tally(pool)
    store = CheckpointStore(projection.schema)
    await publish(nc, [turn(tenant, "u1") for _ in range(3)])
    async with pool.connection() as conn, conn.transaction():
        await store.ensure_layout(conn, projection.name, 1)
        await store.repartition(conn, projection.name, 4, 10**9)
    from habitus.projection.checkpoints import LayoutBusy
    with pytest.raises(LayoutBusy, match="still being repartitioned"):
        async with pool.connection() as conn, conn.transaction():
            await store.repartition(conn, projection.name, 2, 10**9)


# ---------------------------------------------------------------------- replicas


async def test_two_replicas_share_the_partitions_and_one_takes_all_when_the_other_leaves(
        nc: Any, pool: Any, servers: ServerUrls) -> None:
    projection, tenant = await ordered_tally(pool)
    events = [turn(tenant, f"u{i % 31}") for i in range(600)]
    seqs = [r.seq for r in await publish(nc, events)]

    def member(name: str) -> Membership:
        return Membership("tally", projection.schema, [projection], nc, pool, partitions=4,
                          lease_seconds=1.5, member=name, runner_config=FAST)

    a, b = member(unique("a")), member(unique("b"))
    await a.start()
    await b.start()
    try:
        await eventually(lambda: _settled_share(a, b), timeout=10)
        assert len(a.share) == len(b.share) == 2
        await eventually(lambda: _applied_all(pool, projection, events, seqs), timeout=30)
        await b.stop()  # leaves: a takes all four at its next renewal
        more = [turn(tenant, f"u{i % 31}") for i in range(200)]
        more_seqs = [r.seq for r in await publish(nc, more)]
        await eventually(lambda: _owns_all(a), timeout=10)
        await eventually(lambda: _applied_all(pool, projection, events + more,
                                              seqs + more_seqs), timeout=30)
        async with pool.connection() as conn:
            rows = await CheckpointStore(projection.schema).layout(conn, projection.name)
        assert {r.owner for r in rows} == {a.member}
    finally:
        await a.stop()
        await b.stop()
    assert conninfo(servers.database)  # the servers outlive the members


async def _settled_share(a: Membership, b: Membership) -> bool:
    return (sorted(a.members) == sorted(b.members) == sorted([a.member, b.member])
            and {p for _, p in a.share}.isdisjoint({p for _, p in b.share})
            and len(a.runners) + len(b.runners) == 4)


async def _owns_all(a: Membership) -> bool:
    await a.renew()
    return sorted(p for _, p in a.share) == layout(4) and len(a.runners) == 4


async def _applied_all(pool: Any, projection: OrderedTally, events: list[Any],
                       seqs: list[int]) -> bool:
    return await applied(pool, projection) == expected(events, seqs)

