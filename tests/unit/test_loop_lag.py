"""The event loop's lag: a wake-up held by a synchronous stretch is counted as late as it was,
and a loop left free wakes on time."""

from __future__ import annotations

import asyncio
import time
import uuid

from habitus.telemetry import loop_lag, metrics


def _sample(suffix: str, process: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(
        f"habitus_event_loop_lag_seconds_{suffix}", {"process": process, **labels})
    return value or 0.0


async def test_a_held_loop_is_measured_as_late_as_it_was_held() -> None:
    process = f"test-{uuid.uuid4().hex[:8]}"
    watching = asyncio.create_task(loop_lag.watch(process, interval=0.02))
    try:
        await asyncio.sleep(0.2)  # free: the timer wakes about on time
        time.sleep(0.4)  # noqa: ASYNC251 - the point: a synchronous stretch holds the loop
        await asyncio.sleep(0.1)
    finally:
        watching.cancel()
    count = _sample("count", process)
    assert count >= 5
    # the wake-up the stretch held is past a quarter second late
    assert count - _sample("bucket", process, le="0.25") >= 1
    assert _sample("sum", process) >= 0.3
    # the free wake-ups were counted too, and were not late
    assert _sample("bucket", process, le="0.1") >= 4
