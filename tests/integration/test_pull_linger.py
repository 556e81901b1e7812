"""A batch that is not full waits for more while events flow, and a lone event never waits.

Real NATS: a stream, a durable pull consumer and `BatchPuller` as the runner uses it. The
linger here is long (2 s) and the second event comes 0.5 s after the first, so the batches'
contents, not their timings, tell the two cases apart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from habitus.bus.pull import BatchPuller
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio
LINGER = 2.0
GAP = 0.5


async def puller(nc: Any) -> tuple[BatchPuller, str]:
    name = unique("linger").upper().replace("-", "_")
    subject = f"linger.{name}"
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[subject]))
    await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.ALL))
    pull = BatchPuller(nc, name, "c", linger_seconds=LINGER)
    await pull.start()
    return pull, subject


async def two_apart(nc: Any, subject: str) -> None:
    js = nc.jetstream()
    await js.publish(subject, b"first")
    await asyncio.sleep(GAP)
    await js.publish(subject, b"second")


async def test_a_lone_event_is_handed_out_at_once(nc: Any) -> None:
    pull, subject = await puller(nc)
    sending = asyncio.create_task(two_apart(nc, subject))
    first = await pull.fetch(100, timeout=10)
    await sending
    second = await pull.fetch(100, timeout=10)
    assert [m.data for m in first] == [b"first"]  # nothing flowed before it: not held
    assert [m.data for m in second] == [b"second"]
    await pull.stop()


async def test_while_events_flow_a_batch_waits_to_fill(nc: Any) -> None:
    pull, subject = await puller(nc)
    js = nc.jetstream()
    for i in range(50):
        await js.publish(subject, f"burst {i}".encode())
    sizes: list[int] = []
    while sum(sizes) < 50:
        sizes.append(len(await pull.fetch(100, timeout=10)))
    assert max(sizes) > 1  # a batch of several: events are flowing
    sending = asyncio.create_task(two_apart(nc, subject))
    batch = await pull.fetch(100, timeout=10)
    await sending
    assert [m.data for m in batch] == [b"first", b"second"]  # held until the second came
    await pull.stop()

