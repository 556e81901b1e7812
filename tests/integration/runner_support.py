"""Helpers shared by the projection-runner tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from habitus.bus import EventPublisher
from habitus.events import Event
from habitus.projection import ProjectionRunner, RunnerConfig
from tests.support.factories import unique
from tests.support.tally import TallyProjection

FAST = RunnerConfig(
    batch_size=200,
    fetch_timeout=0.2,
    ack_wait=2.0,
    max_deliver=3,
    retry_delays=(0.05, 0.1, 0.2),
    transient_attempts=3,
    transient_max_wait=0.2,
    standby_poll=0.2,
    graceful_timeout=10.0,
)


async def new_tally(pool: Any) -> tuple[TallyProjection, str]:
    tenant = unique("t")
    projection = TallyProjection(unique("tally"), tenant)
    async with pool.connection() as conn:
        for stmt in projection.ddl():
            await conn.execute(stmt)
        await conn.commit()
    return projection, tenant


async def publish(nc: Any, events: list[Event[Any]]) -> list[Any]:
    return await EventPublisher(nc.jetstream()).publish_many(events)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0,
                     interval: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if await check():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def run_to_end(projection: TallyProjection, nc: Any, pool: Any,
                     config: RunnerConfig = FAST) -> ProjectionRunner:
    runner = ProjectionRunner(projection, nc, pool, config=config)
    await runner.run_until_caught_up(timeout=60)
    return runner
