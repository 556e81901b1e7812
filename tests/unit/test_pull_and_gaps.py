"""The batch puller's request bookkeeping and the runner's delivery-gap check, without a server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from habitus.bus.pull import BatchPuller, delivery_info
from habitus.projection.runner import ProjectionRunner, Rewind


class FakeNats:
    """Records pull requests; the server side never answers (as when a status message is lost
    in a reconnect)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes, str]] = []

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str, cb: Any) -> Any:
        class Sub:
            async def unsubscribe(self) -> None:
                return None

        return Sub()

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        self.requests.append((subject, payload, reply))


async def test_a_request_whose_end_was_never_seen_expires_and_is_sent_again() -> None:
    nc = FakeNats()
    puller = BatchPuller(nc, "S", "c")  # type: ignore[arg-type]
    await puller.start()
    for _ in range(3):
        with pytest.raises(NatsTimeoutError):
            await puller.fetch(10, timeout=0.05)
    assert len(nc.requests) == 1  # still within the first request's expiry (+1 s grace)
    await asyncio.sleep(1.1)
    with pytest.raises(NatsTimeoutError):
        await puller.fetch(10, timeout=0.05)
    assert len(nc.requests) == 2  # the lost request was given up and a new one sent


def ack_msg(consumer_seq: int, stream_seq: int) -> Msg:
    reply = f"$JS.ACK.S.c.1.{stream_seq}.{consumer_seq}.0.0"
    return Msg(_client=None, subject="x", reply=reply, data=b"")  # type: ignore[arg-type]


def test_delivery_info_reads_the_consumer_sequence() -> None:
    info = delivery_info(ack_msg(7, 42))
    assert (info.stream_seq, info.consumer_seq, info.num_delivered) == (42, 7, 1)


def runner_expecting(next_delivery: int) -> ProjectionRunner:
    runner = ProjectionRunner.__new__(ProjectionRunner)
    runner._next_delivery = next_delivery
    return runner


def test_contiguous_deliveries_advance_the_expectation() -> None:
    runner = runner_expecting(1)
    runner._check_contiguous([ack_msg(2, 11), ack_msg(1, 10), ack_msg(3, 12)])
    assert runner._next_delivery == 4


@pytest.mark.parametrize("numbers", [[2, 3], [1, 3], [5]], ids=["first-missing", "hole", "far"])
def test_a_gap_in_the_deliveries_rewinds(numbers: list[int]) -> None:
    runner = runner_expecting(1)
    with pytest.raises(Rewind):
        runner._check_contiguous([ack_msg(n, 100 + n) for n in numbers])
    assert runner._next_delivery == 1


def delivered(stream_seq: int, pending: int) -> Msg:
    reply = f"$JS.ACK.S.c.1.{stream_seq}.{stream_seq}.0.{pending}"
    return Msg(_client=None, subject="habitus.v1.event.X.t.u", reply=reply,  # type: ignore[arg-type]
               data=b"{}")


async def fetching(batch: int, burst_seconds: float) -> tuple[BatchPuller, asyncio.Task[list[Msg]]]:
    """A puller with a fetch of `batch` under way (its request sent, nothing arrived yet)."""
    puller = BatchPuller(FakeNats(), "S", "c", burst_seconds=burst_seconds)  # type: ignore[arg-type]
    await puller.start()
    fetch = asyncio.create_task(puller.fetch(batch, timeout=5))
    await asyncio.sleep(0)
    return puller, fetch


async def handed_out(fetch: asyncio.Task[list[Msg]]) -> list[int]:
    return [delivery_info(m).stream_seq for m in await asyncio.wait_for(fetch, 5)]


async def test_a_delivery_with_nothing_pending_is_handed_out_without_gathering() -> None:
    # A burst window of a minute: waiting for it would time the test out.
    puller, fetch = await fetching(10, burst_seconds=60)
    await puller._on_msg(delivered(1, pending=0))
    assert await handed_out(fetch) == [1]


async def test_a_delivery_with_more_pending_waits_for_the_rest_of_the_burst() -> None:
    # A burst window of a minute: the batch is handed out once the burst's last delivery
    # (the one that says nothing more is pending) is in, not when the window ends.
    puller, fetch = await fetching(10, burst_seconds=60)
    await puller._on_msg(delivered(1, pending=2))
    await asyncio.sleep(0.05)
    assert not fetch.done()  # two more are on their way
    await puller._on_msg(delivered(2, pending=1))
    await puller._on_msg(delivered(3, pending=0))
    assert await handed_out(fetch) == [1, 2, 3]


async def test_a_burst_larger_than_the_batch_hands_out_a_full_batch_at_once() -> None:
    puller, fetch = await fetching(3, burst_seconds=60)
    for seq in range(1, 4):
        await puller._on_msg(delivered(seq, pending=100 - seq))
    assert await handed_out(fetch) == [1, 2, 3]


async def test_a_burst_whose_rest_never_comes_is_handed_out_after_the_window() -> None:
    # The stream said more were pending, but they went to another puller (or the request
    # ended): what arrived goes out once the window passed.
    puller, fetch = await fetching(10, burst_seconds=0.1)
    await puller._on_msg(delivered(1, pending=5))
    assert await handed_out(fetch) == [1]
