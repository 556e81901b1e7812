"""One build of a user's prompt context at a time, however many agents ask for it.

When a hot user's context changes, every agent of that user misses the cache at once and each
would read Postgres and build the same text (a stampede, at the moment the renderer is busiest:
it has just applied the change). Calls that miss while a build of the same (tenant, user,
variant) is under way wait for it instead, provided it is new enough for them: a build is only
as fresh as the checkpoint it read, and a caller that already saw a change mark (set before the
change commits) must not be handed a build that read the data before that change. So a waiter
takes the shared result only if its stamps reach the marks the waiter saw (each its own), as
the cache itself does (habitus.context_cache.usable), and builds on its own otherwise.

Pure asyncio, no I/O of its own: the build is the caller's. A build is shielded from the
cancellation of any one caller (an RPC timing out), so the others still get it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from habitus.context_cache import Stamp

T = TypeVar("T")


class Coalescer(Generic[T]):
    """Builds in flight by key; `run` joins one that is fresh enough or starts its own."""

    def __init__(self) -> None:
        self._building: dict[Hashable, asyncio.Future[tuple[T, Stamp]]] = {}

    def __len__(self) -> int:
        return len(self._building)

    async def run(self, key: Hashable, floor: Stamp,
                  build: Callable[[], Awaitable[tuple[T, Stamp]]]) -> tuple[T, bool]:
        """The value of a build for `key` stamped at `floor` or later, and whether it was
        another caller's. `build` returns (value, stamp): the checkpoints its inputs were at."""
        shared = self._building.get(key)
        if shared is not None:
            value, stamp = await asyncio.shield(shared)
            if stamp.reaches(floor):
                return value, True
        mine: asyncio.Future[tuple[T, Stamp]] = asyncio.ensure_future(build())
        self._building[key] = mine  # the newest build is the one later callers join

        def done(future: asyncio.Future[tuple[T, Stamp]]) -> None:
            if self._building.get(key) is future:
                del self._building[key]
            if not future.cancelled():
                future.exception()  # retrieved: a failure nobody waits for is not logged

        mine.add_done_callback(done)
        value, _ = await asyncio.shield(mine)
        return value, False
