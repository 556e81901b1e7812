"""Once events flow steadily, a batch that is not full waits for more; a lone event and a
short burst never wait; a steady flow stays steady through a pause (a client waiting out a 429),
and not through a long one.

Real NATS: a stream, a durable pull consumer and `BatchPuller` as the runner uses it. The
linger here is long (2 s), a flow counts as steady after 0.5 s and survives a pause of up to
1.2 s, and the second of two events comes 0.5 s after the first, so the batches' contents, not
their timings, tell the cases apart.
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
SUSTAINED = 0.5
PAUSE = 1.2
GAP = 0.5


async def puller(nc: Any) -> tuple[BatchPuller, str]:
    name = unique("linger").upper().replace("-", "_")
    subject = f"linger.{name}"
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[subject]))
    await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.ALL))
    pull = BatchPuller(nc, name, "c", linger_seconds=LINGER, sustained_seconds=SUSTAINED,
                       pause_seconds=PAUSE)
    await pull.start()
    return pull, subject


async def two_apart(nc: Any, subject: str) -> None:
    js = nc.jetstream()
    await js.publish(subject, b"first")
    await asyncio.sleep(GAP)
    await js.publish(subject, b"second")


async def take(pull: BatchPuller, n: int) -> None:
    got = 0
    while got < n:
        got += len(await pull.fetch(100, timeout=10))


async def first_batch_of_two_apart(nc: Any, pull: BatchPuller, subject: str) -> list[bytes]:
    sending = asyncio.create_task(two_apart(nc, subject))
    batch = await pull.fetch(100, timeout=10)
    await sending
    await take(pull, 2 - len(batch))
    return [m.data for m in batch]


async def test_a_lone_event_is_handed_out_at_once(nc: Any) -> None:
    pull, subject = await puller(nc)
    assert await first_batch_of_two_apart(nc, pull, subject) == [b"first"]
    await pull.stop()


async def test_a_short_burst_passes_through_as_before(nc: Any) -> None:
    pull, subject = await puller(nc)
    js = nc.jetstream()
    for i in range(50):
        await js.publish(subject, f"burst {i}".encode())
    await take(pull, 50)
    # right after the burst, but it did not last: not held
    assert await first_batch_of_two_apart(nc, pull, subject) == [b"first"]
    await pull.stop()


async def steady(nc: Any, pull: BatchPuller, subject: str) -> None:
    """A steady flow, each of its batches taken: 20 events 50 ms apart."""
    js = nc.jetstream()

    async def trickle() -> None:
        for i in range(20):
            await js.publish(subject, f"steady {i}".encode())
            await asyncio.sleep(0.05)

    sending = asyncio.create_task(trickle())
    await take(pull, 20)
    await sending


async def test_once_events_flow_steadily_a_batch_waits_to_fill(nc: Any) -> None:
    pull, subject = await puller(nc)
    await steady(nc, pull, subject)
    assert await first_batch_of_two_apart(nc, pull, subject) == [b"first", b"second"]
    await pull.stop()


async def test_a_steady_flow_goes_on_after_a_pause(nc: Any) -> None:
    pull, subject = await puller(nc)
    await steady(nc, pull, subject)
    await asyncio.sleep(PAUSE / 2)  # clients waiting out a Retry-After
    assert await first_batch_of_two_apart(nc, pull, subject) == [b"first", b"second"]
    await pull.stop()


async def test_a_long_pause_ends_the_flow(nc: Any) -> None:
    pull, subject = await puller(nc)
    await steady(nc, pull, subject)
    await asyncio.sleep(PAUSE + 0.3)
    assert await first_batch_of_two_apart(nc, pull, subject) == [b"first"]
    await pull.stop()
