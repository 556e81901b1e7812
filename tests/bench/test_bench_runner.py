"""Projection runner throughput vs raw JetStream pull+ack of the same messages."""

from __future__ import annotations

import time
from typing import Any

import pytest

from habitus.bus.streams import INGEST
from habitus.projection import ProjectionRunner, RunnerConfig
from habitus.telemetry.gc_tuning import tune_gc
from tests.integration.runner_support import new_tally, publish
from tests.support.factories import turn

pytestmark = pytest.mark.asyncio
N = 20_000


async def raw_pull_ack(nc: Any, subject: str, n: int, stream: str = INGEST) -> float:
    """Baseline: nats-py's own pull consumer, fetch 1000, ack each message."""
    js = nc.jetstream()
    sub = await js.pull_subscribe(subject, durable=None, stream=stream)
    got = 0
    started = time.perf_counter()
    while got < n:
        msgs = await sub.fetch(1000, timeout=5)
        for m in msgs:
            await m.ack()
        got += len(msgs)
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return n / elapsed


async def test_runner_throughput_ratio(nc: Any, pool: Any, record: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, f"u{i % 50}") for i in range(N)]
    for i in range(0, N, 2000):
        await publish(nc, events[i : i + 2000])

    before = await raw_pull_ack(nc, projection.filter_subjects[0], N)

    config = RunnerConfig(batch_size=1000, fetch_timeout=0.5)
    runner = ProjectionRunner(projection, nc, pool, config=config)
    tune_gc()  # as ServiceHost does once a service has started
    started = time.perf_counter()
    await runner.run_until_caught_up(timeout=300)
    elapsed = time.perf_counter() - started
    rate = N / elapsed
    # The baseline is measured before and after, and averaged, so drift on a shared machine
    # during the run does not favour either side.
    after = await raw_pull_ack(nc, projection.filter_subjects[0], N)
    baseline = (before + after) / 2

    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT sum(n) FROM {projection.schema}.counts")
        row = await cur.fetchone()
    assert row is not None and int(row[0]) == N
    record("runner_throughput", events=N, batch=config.batch_size,
           raw_pull_ack_per_s=round(baseline), runner_per_s=round(rate),
           ratio=round(rate / baseline, 3), target=">= 0.5")
