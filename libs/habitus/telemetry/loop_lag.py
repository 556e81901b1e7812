"""How late a process's event loop runs what is due.

A request reaching a busy process waits before any of its code runs: for the callbacks ahead
of it on the event loop, and for a core when the machine is saturated. Neither shows in a
handler's own duration, so a slow read under load looked like a slow read path. A timer that
should fire every `INTERVAL` seconds and is woken late measures both waits, as the request would
see them; `habitus_event_loop_lag_seconds` keeps the distribution per process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from habitus.telemetry import metrics

#: a timer four times a second: fine enough for a p99 over a minute's scrape, cheap (one
#: wake-up per quarter second per process)
INTERVAL = 0.25


async def watch(process: str, interval: float = INTERVAL,
                clock: Callable[[], float] = time.monotonic) -> None:
    """Observe, forever, how late each wake-up of a timer due every `interval` seconds is."""
    lag = metrics.LOOP_LAG.labels(process)
    while True:
        due = clock() + interval
        await asyncio.sleep(interval)
        lag.observe(max(0.0, clock() - due))
