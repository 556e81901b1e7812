"""Two replicas share a projection's four partitions; one is SIGKILLed mid-stream.

Each replica is a `tally_worker` process in replica mode (a `Membership` over a
TallyProjection split four ways, lease 3 s). They split the partitions two and two; while they
apply 8,000 events the one holding partitions is SIGKILLed (no batch finished, no lease given
back, its locks gone with its session). The survivor must take the dead one's partitions and
resume them within the lease plus five seconds (their checkpoint rows claimed by it), and at the
end every event is applied once (the tally counts every apply and keeps each event id under a
primary key: a double apply fails and ends in the DLQ, a lost one is a missing row) and in each
user's stream order.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.partitions import layout
from tests.chaos.test_runner_sigkill import Worker, dead_letters, publish_all, seen_count
from tests.integration.runner_support import eventually
from tests.support.factories import turn, unique
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos, pytest.mark.slow]

TOTAL = 8_000
USERS = 40
LEASE = 3.0


async def owners(pool: Any, projection: TallyProjection) -> dict[str, str | None]:
    async with pool.connection() as conn:
        rows = await CheckpointStore(projection.schema).layout(conn, projection.name)
    return {r.partition.label: r.owner for r in rows}


async def test_a_killed_replicas_partitions_resume_on_the_other_within_the_lease(
        nc: Any, pool: Any, servers: Any, tmp_path: Path) -> None:
    tenant = unique("t")
    projection = TallyProjection(unique("failover"), tenant)
    async with pool.connection() as conn:
        for stmt in projection.ddl():
            await conn.execute(stmt)
        await conn.commit()
    first = [turn(tenant, f"u{i % USERS}") for i in range(TOTAL // 2)]
    results = await publish_all(nc, first)

    env = {**os.environ, **servers.env()}
    log = tmp_path / "replicas.log"
    common = ("--partitions", "4", "--lease", str(LEASE), "--batch-size", "50")
    a = await Worker.start(env, projection, tenant, log, "--member", "replica-a", *common)
    b = await Worker.start(env, projection, tenant, log, "--member", "replica-b", *common)
    try:
        await a.expect("ready")
        await b.expect("ready")

        async def split_two_and_two() -> bool:
            owned = await owners(pool, projection)
            return sorted(owned.values(), key=str) == ["replica-a"] * 2 + ["replica-b"] * 2

        await eventually(split_two_and_two, timeout=20, interval=0.1)
        await eventually(lambda: _seen_above(pool, projection, TOTAL // 8), timeout=30,
                         interval=0.01)
        lost = sorted(p for p, o in (await owners(pool, projection)).items()
                      if o == "replica-b")
        second = [turn(tenant, f"u{i % USERS}") for i in range(TOTAL // 2)]
        publishing = asyncio.create_task(publish_all(nc, second))
        await b.sigkill()
        killed = time.monotonic()
        assert await seen_count(pool, projection.schema) < TOTAL  # mid-stream

        async def taken_over() -> bool:
            owned = await owners(pool, projection)
            return all(owned[p] == "replica-a" for p in lost)

        await eventually(taken_over, timeout=LEASE + 10, interval=0.05)
        resumed_after = time.monotonic() - killed
        assert resumed_after <= LEASE + 5, (resumed_after, a.tail())
        results += await publishing

        async def all_applied() -> bool:
            return await seen_count(pool, projection.schema) >= TOTAL

        await eventually(all_applied, timeout=60, interval=0.2)
        assert sorted(await owners(pool, projection)) == [p.label for p in layout(4)]
        assert await a.sigterm() == 0, a.tail()
    finally:
        await a.sigkill()
        await b.sigkill()

    events = first + second
    by_id = {e.event_id: e for e in events}
    assert await read_counts(pool, projection.schema) == fold(events)
    seen = await read_seen(pool, projection.schema)
    assert sorted(seen) == sorted((r.event_id, r.seq, by_id[r.event_id].user_id)
                                  for r in results)
    # a redelivery applied twice would have hit `seen`'s key, been retried, then dead-lettered
    assert await dead_letters(nc, projection) == 0
    print(f"\nfailover: partitions {lost} resumed on the survivor {resumed_after:.2f} s after "
          f"the SIGKILL (lease {LEASE} s)")


async def _seen_above(pool: Any, projection: TallyProjection, n: int) -> bool:
    return await seen_count(pool, projection.schema) > n
