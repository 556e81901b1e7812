"""Transient faults: Postgres going away (and coming back) under a running projection, and a
stop in the middle of a slow batch. Nothing may be lost or applied twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from habitus.db.pool import open_pool
from habitus.projection import ProjectionRunner
from habitus.runtime.embedded import EmbeddedPostgres
from tests.integration.runner_support import FAST, eventually, new_tally, publish
from tests.support.factories import turn
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos, pytest.mark.slow]


async def test_postgres_outage_mid_stream_loses_nothing(nc: Any, tmp_path: Path) -> None:
    # A private Postgres, so stopping it does not disturb the rest of the suite.
    pg = EmbeddedPostgres(tmp_path, extra_options={"fsync": "off"})
    url = await asyncio.to_thread(pg.start)
    pool = await open_pool(url, min_size=1, max_size=4, name="chaos")
    try:
        projection, tenant = await new_tally(pool)
        events = [turn(tenant, f"u{i % 7}") for i in range(3000)]
        await publish(nc, events[:1500])
        runner = ProjectionRunner(projection, nc, pool, config=FAST)
        runner.start()
        await eventually(lambda: _applied_at_least(url, projection, 200))

        await asyncio.to_thread(pg.stop)  # the database disappears mid-stream
        await publish(nc, events[1500:])
        await asyncio.sleep(2.0)  # retries, backoff, batches given back
        await asyncio.to_thread(pg.start)

        await eventually(lambda: _applied_at_least(url, projection, 3000), timeout=90,
                         interval=0.5)
        await runner.stop()
        assert await read_counts(pool, projection.schema) == fold(events)
        seen = await read_seen(pool, projection.schema)
        assert len(seen) == len({e for e, _, _ in seen}) == 3000
    finally:
        await pool.close()
        await asyncio.to_thread(pg.stop)


async def _applied_at_least(url: str, projection: TallyProjection, n: int) -> bool:
    """Checked on a connection of its own: the runner's pool is what is under test."""
    try:
        async with await psycopg.AsyncConnection.connect(url, connect_timeout=2) as conn:
            cur = await conn.execute(f"SELECT coalesce(sum(n), 0) FROM {projection.schema}.counts")
            row = await cur.fetchone()
    except psycopg.Error:
        return False
    return row is not None and int(row[0]) >= n


async def test_stop_finishes_the_batch_in_flight(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, "u1") for _ in range(50)]
    await publish(nc, events)
    entered = asyncio.Event()

    class Slow(TallyProjection):
        async def apply_batch(self, cur: Any, batch: Any, ctx: Any) -> None:
            entered.set()
            await asyncio.sleep(1.0)  # the stop arrives while this batch is being applied
            await super().apply_batch(cur, batch, ctx)

    slow = Slow(projection.schema, tenant)
    runner = ProjectionRunner(slow, nc, pool, config=FAST)
    runner.start()
    await entered.wait()
    await runner.stop()
    applied = sum((await read_counts(pool, projection.schema)).values())
    assert applied > 0  # the batch in flight was finished, not abandoned

    # Whatever was not applied is still in the stream: a new runner applies exactly the rest.
    await ProjectionRunner(projection, nc, pool, config=FAST).run_until_caught_up(timeout=60)
    assert await read_counts(pool, projection.schema) == fold(events)
