"""An idle runner checks in less and less often, and still applies an event the moment it
arrives: its fetch waits longer each time it finds nothing, and a fetch ends when an event
comes, not when its wait is over."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from habitus.projection import ProjectionRunner
from tests.integration.runner_support import FAST, eventually, new_tally, publish
from tests.support.factories import turn
from tests.support.tally import read_counts

pytestmark = pytest.mark.asyncio


async def test_an_idle_runner_waits_longer_and_still_applies_at_once(nc: Any, pool: Any
                                                                      ) -> None:
    projection, tenant = await new_tally(pool)
    await publish(nc, [turn(tenant, "ann")])
    config = dataclasses.replace(FAST, fetch_timeout=0.25, idle_fetch_timeout=30.0)
    runner = ProjectionRunner(projection, nc, pool, config=config)
    idle_ends = 0
    check_epoch = runner._check_epoch

    async def counted() -> None:
        nonlocal idle_ends
        idle_ends += 1
        await check_epoch()

    runner._check_epoch = counted  # type: ignore[method-assign]
    task = asyncio.create_task(runner.run())
    try:
        await eventually(lambda: _counts_are(pool, projection.schema, {"ann": 1}), timeout=30)
        # idle 8 s: a fetch every 0.25 s would end 32 times; waits of 0.25, 0.5, 1, 2, 4 and
        # then 8 s end about six times, and a slow machine only ends fewer
        await asyncio.sleep(8)
        assert 2 <= idle_ends <= 10, idle_ends
        # the fetch under way now waits up to 8 s (until about 15.75 s); an event published
        # now is applied long before that, because the fetch ends when it arrives
        sent = time.monotonic()
        await publish(nc, [turn(tenant, "ann")])
        await eventually(lambda: _counts_are(pool, projection.schema, {"ann": 2}), timeout=6)
        assert time.monotonic() - sent < 6
    finally:
        await runner.stop()
        await task


async def _counts_are(pool: Any, schema: str, expected: dict[str, int]) -> bool:
    return await read_counts(pool, schema) == expected
