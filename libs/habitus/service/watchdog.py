"""A supervised service that outlives its supervisor stops itself.

`habitus up` spawns each service with a parent-death signal (`habitus.runtime.lifetime`), but
that signal misses the instant between the fork and arming it, and some systems have none. So
the service also watches: the supervisor tells it, in `SUPERVISOR_PID_ENV`, which pid its
parent must be, and the service host polls for a change. This is the service's half of the
contract; the supervisor (`habitus.runtime.supervisor`, above the service layer) sets the
variable, so the name is defined here, where it is read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

#: Set by the supervisor of `habitus up` for each service it spawns: the pid its parent must be.
SUPERVISOR_PID_ENV = "HABITUS_SUPERVISOR_PID"


def orphan_watchdog(
    on_orphaned: Callable[[], None], interval: float = 1.0, grace: float = 45.0
) -> asyncio.Task[None] | None:
    """For a service spawned by `habitus up`: once its parent is no longer the supervisor that
    spawned it (it died; the parent-death signal covers this too, but not the instant between
    the fork and arming it, nor systems without one), call `on_orphaned` (a graceful stop), and
    exit outright if still alive `grace` s later. None when not run by a supervisor."""
    expected = os.environ.get(SUPERVISOR_PID_ENV, "")
    if not expected.isdigit():
        return None
    parent = int(expected)

    async def watch() -> None:
        while True:  # polled: no event tells a process that its parent changed
            if os.getppid() != parent:
                break
            await asyncio.sleep(interval)
        on_orphaned()
        await asyncio.sleep(grace)
        os._exit(70)

    return asyncio.create_task(watch(), name="orphan-watchdog")
