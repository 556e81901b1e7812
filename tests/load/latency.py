"""The read-latency probe: one client, one call at a time, the same before and during the burst.

Locust's readers say how reads fare among many; this probe is what makes idle and loaded
comparable (same client, same users, same calls, no concurrency of its own), in the manner of
`make bench`'s `prompt.context` against `/healthz`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import httpx


def served_from(response: httpx.Response) -> str:
    """Where the gateway says a `prompt.context` answer came from (its `Server-Timing`
    metric: memory, cache, renderer); "" when it does not say."""
    header: str = response.headers.get("server-timing", "")
    return header.split(";", 1)[0].strip()


async def timed_healthz(client: httpx.AsyncClient) -> float:
    started = time.perf_counter()
    response = await client.get("/healthz")
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


async def timed_context(client: httpx.AsyncClient, user: str, key: str) -> tuple[float, str]:
    """Seconds one `prompt.context` for `user` took, and where its answer came from
    (`served_from`); raises on a non-200."""
    started = time.perf_counter()
    response = await client.post("/v1/rpc/prompt.context", json={"user_id": user},
                                 headers={"Authorization": f"Bearer {key}"})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, served_from(response)


async def idle(client: httpx.AsyncClient, users: Sequence[str], key: str, n: int
               ) -> tuple[list[float], list[str], list[float]]:
    """`n` `prompt.context` calls over `users` (their seconds and sources) and `n` `/healthz`
    calls, one after the other in turn: right after the warm-up the machine is still settling
    (rebuilds, Postgres's own work), and with all of one kind first, then all of the other,
    that drift fell on the first kind alone."""
    await timed_healthz(client)  # the connection made before anything is timed
    calls: list[tuple[float, str]] = []
    health: list[float] = []
    for i in range(n):
        calls.append(await timed_context(client, users[i % len(users)], key))
        health.append(await timed_healthz(client))
    return [c[0] for c in calls], [c[1] for c in calls], health


async def while_running(client: httpx.AsyncClient, users: Sequence[str], key: str,
                        running: Callable[[], bool], every: float = 0.25
                        ) -> tuple[list[float], list[str]]:
    """`prompt.context` every `every` seconds while `running()` holds: each call's seconds,
    and where its answer came from (`served_from`); failures are left out (locust counts the
    errors: this measures how long an answer takes)."""
    times: list[float] = []
    sources: list[str] = []
    i = 0
    while running():
        try:
            elapsed, source = await timed_context(client, users[i % len(users)], key)
            times.append(elapsed)
            sources.append(source)
        except httpx.HTTPError:
            pass
        i += 1
        await asyncio.sleep(every)
    return times, sources
