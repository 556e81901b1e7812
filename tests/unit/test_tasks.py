"""`habitus.tasks.stop_task`: a background loop is stopped for certain, its clean-up left alone."""

from __future__ import annotations

import asyncio

import pytest

from habitus.tasks import stop_task

pytestmark = pytest.mark.asyncio


async def test_a_loop_that_lost_its_cancel_is_stopped_all_the_same() -> None:
    """What Python 3.11's `wait_for` does when a cancel lands as its inner awaitable
    completes: the cancel is swallowed and the loop goes on. One cancel would leave it running."""
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        swallowed = False
        while True:
            rounds += 1
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True  # the first cancel is lost

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.03)
    assert await stop_task(task) is None
    assert task.cancelled()
    ran = rounds
    await asyncio.sleep(0.05)
    assert rounds == ran  # nothing runs on


async def test_a_clean_up_within_the_grace_is_not_interrupted() -> None:
    cleaned = asyncio.Event()

    async def loop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.2)  # a lock released, a client closed
            cleaned.set()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await stop_task(task)
    assert cleaned.is_set()


async def test_the_error_a_task_ended_with_is_returned_not_raised() -> None:
    async def failing() -> None:
        raise ValueError("the poll broke")

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    error = await stop_task(task)
    assert isinstance(error, ValueError) and str(error) == "the poll broke"
    assert await stop_task(None) is None


async def test_a_cancel_of_the_caller_propagates() -> None:
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue  # deaf to cancels: only the caller's own cancel gets it out

    inner = asyncio.create_task(stubborn())
    outer = asyncio.create_task(stop_task(inner))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert not inner.done()
    released.set()
    await inner
