"""The ceiling a run is compared with: raw acked JetStream publishes on the same NATS.

As in `make bench` (tests/bench/test_bench_gateway.py), absolute rates move with the machine
and its neighbours, a ratio much less: the run publishes the same number of messages, of the
run's own item sizes, with a window of acked async publishes, to a scratch stream of the same
storage as the real ones, and deletes the stream after. Nothing in Habitus reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from nats.js.api import StorageType, StreamConfig

WINDOW = 500
#: the baseline is a rate: past this many messages more of them measure nothing new
MAX_MESSAGES = 50_000


async def raw_acked_publish(js: Any, bodies: list[bytes], count: int,
                            storage: str = "file") -> tuple[float, int]:
    """Publish `count` messages (cycling through `bodies`) and wait for every PubAck; returns
    (messages per second, messages published)."""
    count = max(1, min(count, MAX_MESSAGES))
    name = f"HABITUS_LOAD_SCRATCH_{uuid.uuid4().hex[:8].upper()}"
    root = f"habitus.loadscratch.{name.lower()}"
    await js.add_stream(StreamConfig(
        name=name, subjects=[f"{root}.>"],
        storage=StorageType.FILE if storage == "file" else StorageType.MEMORY))
    try:
        started = time.perf_counter()
        for offset in range(0, count, WINDOW):
            futures = [await js.publish_async(f"{root}.{i % 64}",
                                              bodies[i % len(bodies)],
                                              headers={"Nats-Msg-Id": f"{name}-{i}"})
                       for i in range(offset, min(count, offset + WINDOW))]
            await asyncio.gather(*futures)
        elapsed = time.perf_counter() - started
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(name)
    return count / elapsed, count
