"""Stopping a background task for certain.

Services run loops beside their projections (a scheduler, a poll, a relearn) and stop them by
cancelling their task. On Python 3.11 one cancel is not always enough: when it lands while the
loop awaits `asyncio.wait_for` (nats-py's fetch and request do, and so do our polls) in the very
step the inner awaitable completes, `wait_for` returns its result and the cancel is lost. A loop
that only a cancel ends then runs on, and whoever awaits it (a host's shutdown, a test's
teardown) waits for ever. `stop_task` cancels again until the task has ended, so the next await
of the loop ends it. The repeat waits a second: long enough for a loop's own clean-up (a lock
released, a client closed) to finish undisturbed, short enough for a shutdown.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: how long one cancel is given to end the task before it is repeated
RECANCEL_SECONDS = 1.0


async def stop_task(task: asyncio.Task[Any] | None) -> BaseException | None:
    """Cancel `task` and wait until it has ended, cancelling again while it runs on.

    Returns the error the task had ended with, if any (not its cancellation), for a caller
    that reports it; it never raises it. A cancel of the caller itself propagates."""
    if task is None:
        return None
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_SECONDS)
    return None if task.cancelled() else task.exception()
