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


async def timed_rpc(client: httpx.AsyncClient, method: str, user: str, key: str) -> float:
    """Seconds one `POST /v1/rpc/<method>` for `user` took; raises on a non-200."""
    started = time.perf_counter()
    response = await client.post(f"/v1/rpc/{method}", json={"user_id": user},
                                 headers={"Authorization": f"Bearer {key}"})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


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


async def idle(client: httpx.AsyncClient, users: Sequence[str], key: str, n: int
               ) -> tuple[list[float], list[float]]:
    """`n` sequential `prompt.context` calls over `users`, then `n` `/healthz` calls."""
    await timed_healthz(client)  # the connection made before anything is timed
    context = [await timed_rpc(client, "prompt.context", users[i % len(users)], key)
               for i in range(n)]
    health = [await timed_healthz(client) for _ in range(n)]
    return context, health


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
            started = time.perf_counter()
            response = await client.post("/v1/rpc/prompt.context",
                                         json={"user_id": users[i % len(users)]},
                                         headers={"Authorization": f"Bearer {key}"})
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            times.append(elapsed)
            sources.append(served_from(response))
        except httpx.HTTPError:
            pass
        i += 1
        await asyncio.sleep(every)
    return times, sources
