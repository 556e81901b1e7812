"""One active runner per projection partition: leadership by a Postgres advisory lock.

Whoever holds the lock (`habitus.db.leader.LeaderLock`, one session per runner, or a
`SessionLock` of the replica's shared `LockSession`) is the only runner that applies the
partition; a standby polls for it. A lock is only known to be lost at
the next round trip on its session, so the leader checks it before a batch, at most once every
`CHECK_EVERY` seconds: every commit is fenced by the checkpoint's epoch
(`CheckpointStore.commit`) whatever the check said, so the check only makes a lost lock
noticed sooner, and one round trip per batch (a runner that keeps up applies dozens of batches a
second, each paying it) bought nothing the fence does not give. Losing the lock mid-run
surfaces as `Fenced`.

`event` is set while this runner believes it leads (the worker's readiness, tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Protocol

from habitus.db.leader import LeaderLock, LostLeadership
from habitus.projection.faults import Fenced

#: a lock found alive is not asked again for this long (seconds)
CHECK_EVERY: Final = 1.0


class Lock(Protocol):
    """A named advisory lock (`LeaderLock`, `SessionLock`)."""

    @property
    def held(self) -> bool: ...
    async def try_acquire(self) -> bool: ...
    async def check(self) -> None: ...
    async def release(self) -> None: ...


def lock_name(projection: str, suffix: str = "") -> str:
    """The advisory lock of a projection (`suffix`: the partition's, '' when whole)."""
    return f"projection:{projection}{suffix}"


class Leadership:
    def __init__(self, conninfo: str, projection: str, lock: Lock | None = None, *,
                 check_every: float = CHECK_EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self._lock: Lock = lock or LeaderLock(conninfo, lock_name(projection))
        self.event = asyncio.Event()
        self._check_every = check_every
        self._clock = clock
        self._alive_at: float | None = None  # when a check last found the lock alive

    @property
    def held(self) -> bool:
        return self._lock.held

    async def try_acquire(self) -> bool:
        """Take the lock if it is free (or still ours); False when another runner holds it."""
        self._alive_at = None
        if self._lock.held:
            try:
                await self._lock.check()  # a dead lock connection is only noticed by using it
            except LostLeadership:
                self.event.clear()
        if await self._lock.try_acquire():
            self.event.set()
            return True
        self.event.clear()
        return False

    async def check(self) -> None:
        """Raise Fenced unless the lock's session is still alive (taken as alive for
        `check_every` seconds after a check found it so; a failure is never remembered)."""
        now = self._clock()
        if self._alive_at is not None and now - self._alive_at < self._check_every:
            return
        self._alive_at = None
        try:
            await self._lock.check()
        except LostLeadership as exc:
            self.event.clear()
            raise Fenced(str(exc)) from exc
        self._alive_at = now

    async def release(self) -> None:
        self._alive_at = None
        self.event.clear()
        await self._lock.release()
