"""A leader's lock check before a batch: a round trip at most once a second while the lock is
found alive, every time once it is not (the epoch fences every commit either way)."""

from __future__ import annotations

import pytest

from habitus.db.leader import LostLeadership
from habitus.projection.faults import Fenced
from habitus.projection.leadership import Leadership


class CountedLock:
    """A lock whose session answers as told, counting the round trips a check makes."""

    def __init__(self) -> None:
        self.checks = 0
        self.alive = True
        self.held = True

    async def try_acquire(self) -> bool:
        self.held = True
        return True

    async def check(self) -> None:
        self.checks += 1
        if not self.alive:
            raise LostLeadership("lock connection lost")

    async def release(self) -> None:
        self.held = False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def leader() -> tuple[CountedLock, Clock, Leadership]:
    """A leadership over a counted lock, on a clock the test moves, asking once a second."""
    lock, clock = CountedLock(), Clock()
    return lock, clock, Leadership("", "p", lock, check_every=1.0, clock=clock)


@pytest.mark.asyncio
async def test_a_lock_found_alive_is_asked_again_only_after_a_second() -> None:
    lock, clock, leadership = leader()
    for _ in range(50):  # fifty batches within the same second
        await leadership.check()
        clock.now += 0.019
    assert lock.checks == 1
    clock.now += 0.1  # past the second
    await leadership.check()
    assert lock.checks == 2


@pytest.mark.asyncio
async def test_a_lost_lock_is_fenced_at_every_check_once_it_is_due() -> None:
    lock, clock, leadership = leader()
    leadership.event.set()
    await leadership.check()
    lock.alive = False
    clock.now += 1.0
    with pytest.raises(Fenced):
        await leadership.check()
    assert not leadership.event.is_set()
    with pytest.raises(Fenced):  # a failure is not remembered as a pass
        await leadership.check()
    assert lock.checks == 3


@pytest.mark.asyncio
async def test_acquiring_and_releasing_forget_the_last_check() -> None:
    lock, _, leadership = leader()  # the clock stands still: only the events count
    await leadership.check()
    await leadership.release()
    await leadership.check()  # a released lock is asked at once
    assert lock.checks == 2
    await leadership.try_acquire()
    await leadership.check()  # newly acquired: asked at once
    assert lock.checks == 3
