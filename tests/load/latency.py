"""The read-latency probe: one client, one call at a time, the same before and during the burst.

Locust's readers say how reads fare among many; this probe is what makes idle and loaded
comparable (same client, same users, same calls, no concurrency of its own), in the manner of
`make bench`'s `prompt.context` against `/healthz`.

It runs in a process of its own (`Probe`), in a session of its own: on the runner's event loop
every call that overlapped the runner's lag sampling (some fifty NATS and Postgres requests a
second, their answers parsed) waited for it, and that wait counted as the gateway's. Like a
client of a real deployment, the probe shares neither an interpreter nor a CPU share
(`sched_autogroup`) with the load or with whoever measures it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

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
                        ) -> tuple[list[float], list[str], list[float]]:
    """`prompt.context` and then `/healthz` every `every` seconds while `running()` holds:
    each call's seconds, where each answer came from (`served_from`), and the `/healthz`
    seconds (what the gateway process answers in under the same load when a call does
    nothing, so a slow read can be told from a slow process). Failures are left out (locust
    counts the errors: this measures how long an answer takes)."""
    times: list[float] = []
    sources: list[str] = []
    health: list[float] = []
    i = 0
    while running():
        try:
            elapsed, source = await timed_context(client, users[i % len(users)], key)
            times.append(elapsed)
            sources.append(source)
            health.append(await timed_healthz(client))
        except httpx.HTTPError:
            pass
        i += 1
        await asyncio.sleep(every)
    return times, sources, health


def _probe_main(kind: str, url: str, args: tuple[Any, ...], stop: Any, out: Any) -> None:
    """The probe process: `idle(*args)` or `while_running(*args)` until `stop` is set; the
    result, or the failure's repr, goes to `out`."""
    os.setsid()

    async def main() -> Any:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            if kind == "idle":
                users, key, n = args
                return await idle(client, users, key, n)
            users, key = args
            return await while_running(client, users, key, lambda: not stop.is_set())

    try:
        out.put(("ok", asyncio.run(main())))
    except BaseException as exc:  # reported to the runner, which raises it
        out.put(("error", repr(exc)))


class Probe:
    """`idle` or `while_running` in a process of its own (see the module's docstring)."""

    def __init__(self, kind: str, url: str, *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._out: Any = context.Queue()
        self._process = context.Process(target=_probe_main, daemon=True,
                                        args=(kind, url, args, self._stop, self._out))

    def start(self) -> Probe:
        self._process.start()
        return self

    async def result(self) -> Any:
        """Stops a `while_running` probe and returns what it measured (an `idle` one ends by
        itself: its result is waited for)."""
        self._stop.set()
        status, value = await asyncio.to_thread(self._wait)
        await asyncio.to_thread(self._process.join, 30)
        if status != "ok":
            raise RuntimeError(f"the latency probe failed: {value}")
        return value

    def _wait(self) -> tuple[str, Any]:
        """The probe's result, or why there is none: a probe process that died (a signal,
        the OOM killer) must not leave the runner waiting for ever."""
        while True:
            try:
                result: tuple[str, Any] = self._out.get(timeout=1)
                return result
            except queue.Empty:
                if self._process.is_alive():
                    continue
            try:  # put just before it ended
                result = self._out.get(timeout=1)
                return result
            except queue.Empty:
                return ("error", "the probe process ended without a result (exit code "
                                 f"{self._process.exitcode})")


async def idle_apart(url: str, users: Sequence[str], key: str, n: int
                     ) -> tuple[list[float], list[str], list[float]]:
    """`idle`, in a probe process of its own."""
    result: tuple[list[float], list[str], list[float]] = await Probe(
        "idle", url, list(users), key, n).start().result()
    return result
