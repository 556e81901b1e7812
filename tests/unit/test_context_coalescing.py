"""The renderer's coalescing of concurrent context builds (services.profile_renderer.coalesce):
one build per (user, variant) at a time, never handed to a caller who already saw a newer change
mark than the build read, and no caller's cancellation or failure stranding the others."""

from __future__ import annotations

import asyncio

import pytest

from habitus.context_cache import Stamp
from services.profile_renderer.coalesce import Coalescer

pytestmark = pytest.mark.asyncio


class Builds:
    """A build that waits until the test lets it finish, counting how often it ran."""

    def __init__(self, stamp: Stamp) -> None:
        self.stamp = stamp
        self.started = 0
        self.gate = asyncio.Event()

    async def __call__(self) -> tuple[str, Stamp]:
        self.started += 1
        n = self.started
        await self.gate.wait()
        return f"built #{n} at {self.stamp.user}", self.stamp


async def test_callers_that_miss_together_share_one_build() -> None:
    coalescer: Coalescer[str] = Coalescer()
    build = Builds(stamp=Stamp(10, 10))
    calls = [asyncio.ensure_future(coalescer.run(("t", "ana", "f", "3"), Stamp(7, 7), build))
             for _ in range(20)]
    await asyncio.sleep(0)
    build.gate.set()
    answers = await asyncio.gather(*calls)
    assert build.started == 1
    assert {value for value, _ in answers} == {"built #1 at 10"}
    assert sum(joined for _, joined in answers) == 19
    assert len(coalescer) == 0  # nothing left behind once it finished


async def test_a_caller_that_saw_a_newer_mark_does_not_take_an_older_build() -> None:
    """The change marked at 12 may have committed after the build read its inputs at 10: the
    caller that saw the mark builds again (the renderer's cache rule, for builds in flight)."""
    coalescer: Coalescer[str] = Coalescer()
    old = Builds(stamp=Stamp(10, 10))
    first = asyncio.ensure_future(coalescer.run("k", Stamp(7, 7), old))
    await asyncio.sleep(0)
    new = Builds(stamp=Stamp(12, 12))
    second = asyncio.ensure_future(coalescer.run("k", Stamp(12, 12), new))
    await asyncio.sleep(0)
    old.gate.set()
    assert await first == ("built #1 at 10", False)
    await asyncio.sleep(0)
    assert new.started == 1  # the shared build was too old for it
    new.gate.set()
    assert await second == ("built #1 at 12", False)


async def test_different_users_or_variants_never_share() -> None:
    coalescer: Coalescer[str] = Coalescer()
    a, b = Builds(stamp=Stamp(5, 5)), Builds(stamp=Stamp(5, 5))
    calls = [asyncio.ensure_future(coalescer.run(("t", "ana", "f"), Stamp(0, 0), a)),
             asyncio.ensure_future(coalescer.run(("t", "ana", "g"), Stamp(0, 0), b))]
    await asyncio.sleep(0)
    a.gate.set()
    b.gate.set()
    assert [joined for _, joined in await asyncio.gather(*calls)] == [False, False]
    assert (a.started, b.started) == (1, 1)


async def test_the_first_caller_giving_up_does_not_cancel_the_build_the_others_wait_for(
) -> None:
    coalescer: Coalescer[str] = Coalescer()
    build = Builds(stamp=Stamp(3, 3))
    first = asyncio.ensure_future(coalescer.run("k", Stamp(0, 0), build))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(coalescer.run("k", Stamp(0, 0), build))
    await asyncio.sleep(0)
    first.cancel()  # its RPC timed out
    await asyncio.sleep(0)
    build.gate.set()
    assert await second == ("built #1 at 3", True)
    assert first.cancelled()


async def test_a_failed_build_fails_its_waiters_and_the_next_call_builds_again() -> None:
    coalescer: Coalescer[str] = Coalescer()
    gate = asyncio.Event()

    async def failing() -> tuple[str, int]:
        await gate.wait()
        raise ConnectionError("postgres went away")

    calls = [asyncio.ensure_future(coalescer.run("k", Stamp(0, 0), failing)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    assert len(coalescer) == 0
    build = Builds(stamp=Stamp(4, 4))
    build.gate.set()
    assert await coalescer.run("k", Stamp(0, 0), build) == ("built #1 at 4", False)


async def test_each_stamp_must_reach_its_own_mark() -> None:
    """Split, the renderer's partition holding the user may be far ahead of the one holding the
    tenant's rules: a build whose user stamp passes every mark but whose tenant stamp is short
    of the tenant's last change is too old (and the reverse)."""
    coalescer: Coalescer[str] = Coalescer()
    ahead = Builds(stamp=Stamp(200, 140))
    first = asyncio.ensure_future(coalescer.run("k", Stamp(100, 100), ahead))
    await asyncio.sleep(0)
    again = Builds(stamp=Stamp(201, 150))
    second = asyncio.ensure_future(coalescer.run("k", Stamp(100, 150), again))
    await asyncio.sleep(0)
    ahead.gate.set()
    assert (await first)[1] is False
    await asyncio.sleep(0)
    assert again.started == 1  # 140 < 150: the tenant's change may be missing from it
    again.gate.set()
    assert await second == ("built #1 at 201", False)
