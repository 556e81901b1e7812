"""What a runner that keeps up spends per event, with and without lingering for a fuller batch.

A runner that keeps up with a steady stream takes its events a few at a time, and every batch
pays a fixed part (its transaction, the checkpoint, the applied-ids claim, the ack). With
`RunnerConfig.linger`, a batch that is not full waits a little for more while events flow.
Here two runners, each in a process of its own, apply the same tenant's turns (two tally
projections, so the runner's own cost is what is measured) while the parent publishes them at
a steady rate; one lingers (the default) and the other does not. Side by side, so the
machine's moods fall on both; five rounds, each a ratio of CPU per event (lingering ÷ not),
the line their median: shown, as the cost of a batch's fixed part, not an issue's line.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from habitus.bus import connect
from habitus.db.pool import open_pool
from habitus.projection import ProjectionRunner, RunnerConfig
from habitus.service.migrations import migrate
from habitus.telemetry.gc_tuning import tune_gc
from tests.conftest import ServerUrls
from tests.integration.runner_support import publish
from tests.support.factories import turn, unique
from tests.support.side_by_side import results_of
from tests.support.tally import TallyProjection

pytestmark = pytest.mark.asyncio
N = 8_000
RATE = 400.0  # turns a second: about what the whole pipeline keeps up with on two cores
ROUNDS = 5


def run_runner(nats: str, database: str, schema: str, tenant: str, linger: float, n: int,
               start: Any, results: Any) -> None:
    """A child's work: apply the tally as the turns come until it counted `n`; its CPU and
    batch count go to `results`. Sealing is on, as by default."""
    from habitus.config import Settings
    from habitus.crypto.setup import keyring_from
    from habitus.events import install_keyring

    install_keyring(keyring_from(Settings(encrypt_events=True)))

    async def main() -> tuple[float, int]:
        nc = await connect(nats, "bench-linger")
        pool = await open_pool(database, min_size=1, max_size=4, name="bench")
        runner = ProjectionRunner(TallyProjection(schema, tenant), nc, pool,
                                  config=RunnerConfig(batch_size=2000, linger=linger))
        tune_gc()
        start.wait()
        began = time.process_time()
        task = asyncio.create_task(runner.run())
        try:
            while True:
                await asyncio.sleep(0.2)
                async with pool.connection() as conn:
                    cur = await conn.execute(
                        f"SELECT coalesce(sum(n), 0) FROM {schema}.counts")
                    row = await cur.fetchone()
                if row is not None and int(row[0]) >= n:
                    break
            cpu = time.process_time() - began
            batches = REGISTRY.get_sample_value(
                "habitus_projection_batch_duration_seconds_count",
                {"projection": f"tests.{schema}"})
        finally:
            await runner.stop()
            await task
            await pool.close()
            await nc.close()
        return cpu, int(batches or 0)

    results.put((linger, *asyncio.run(main())))


async def round_(servers: ServerUrls, nc: Any, pool: Any) -> dict[str, float]:
    tenant = unique("linger")
    schemas = {}
    for linger in (0.0, RunnerConfig().linger):
        schemas[linger] = unique("tally")
        async with pool.connection() as conn:
            for stmt in TallyProjection(schemas[linger], tenant).ddl():
                await conn.execute(stmt)
            await conn.commit()
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(3), spawn.Queue()
    children = [spawn.Process(target=run_runner, args=(
        servers.nats, servers.database, schema, tenant, linger, N, start, results))
        for linger, schema in schemas.items()]
    for child in children:
        child.start()
    await asyncio.to_thread(start.wait)
    events = [turn(tenant, f"u{i % 50}") for i in range(N)]
    began = time.perf_counter()
    for i in range(0, N, 20):  # batches of 20 at a steady rate, as clients send them
        await publish(nc, events[i:i + 20])
        await asyncio.sleep(max(0.0, began + (i + 20) / RATE - time.perf_counter()))
    measured = await results_of(children, results)
    (plain_cpu, plain_batches), (linger_cpu, linger_batches) = measured[0.0], measured[
        RunnerConfig().linger]
    return {"plain_us": plain_cpu / N * 1e6, "linger_us": linger_cpu / N * 1e6,
            "plain_batches": plain_batches, "linger_batches": linger_batches}


async def test_lingering_costs_less_per_event(servers: ServerUrls, nc: Any, pool: Any,
                                              record: Any) -> None:
    migrate(servers.database)
    rounds = [await round_(servers, nc, pool) for _ in range(ROUNDS)]
    ratios = sorted(r["linger_us"] / r["plain_us"] for r in rounds)
    record("runner_linger", events=N, rate=RATE, linger=RunnerConfig().linger,
           plain_us_per_event=round(statistics.median(r["plain_us"] for r in rounds), 1),
           linger_us_per_event=round(statistics.median(r["linger_us"] for r in rounds), 1),
           plain_batches=statistics.median(r["plain_batches"] for r in rounds),
           linger_batches=statistics.median(r["linger_batches"] for r in rounds),
           ratio=round(statistics.median(ratios), 3), rounds=[round(r, 3) for r in ratios],
           target="shown")
