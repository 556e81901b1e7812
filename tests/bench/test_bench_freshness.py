"""Freshness: from the gateway's answer to an ingest to `prompt.context` reflecting what the user
said, under a background ingest load of other users (target: p99 <= 3 x the debounce setting).

The real services run in-process, as `tests/integration/test_producers.py` builds them:
producers, the stability detector with its scheduler on (the default settings), the profile
renderer and the gateway. A background task posts turns for other users through the gateway at
a fixed rate (some of them explicit statements, so those users keep the scheduler busy too).
Each probe user posts one batch of two turns that plainly state the same preference ("I use
<tool>", read by the explicit-statement producer): two Explicit candidates for one facet make it
Active at the first rebuild, which the scheduler requests once the evidence settled. (A single
plain statement scores 2 x ln 2 = 1.39, under the Active threshold 1.5, and stays Provisional;
a standing declaration, "from now on ...", is set at once as the user's own `FacetUpdated` and
waits for no rebuild, so it is not what this measures.) The clock starts at the gateway's 200
and stops at the first `prompt.context` (polled every 20 ms) that contains the statement.
Probes run one after another, so the polling is a constant load of one client.

A second test measures the scheduler's query at 1,000 and 100,000 users (none or ten of them
dirty): a tick every 0.25 s is only cheap if its cost follows the dirty users.

Knobs: HABITUS_BENCH_FRESHNESS_PROBES (default 40), HABITUS_BENCH_FRESHNESS_RATE (background
turns per second, default 200; 0: none), HABITUS_BENCH_FRESHNESS_USERS (background users,
default 200).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import statistics
import time
from typing import Any

import httpx
import pytest

from habitus.auth.keys import create_key
from habitus.bus.streams import EVENTS
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector import store
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.bench.test_bench_prompt_context import percentile
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running
from tests.support.streams import events_on

pytestmark = pytest.mark.asyncio
PROBES = int(os.environ.get("HABITUS_BENCH_FRESHNESS_PROBES", "40"))
RATE = float(os.environ.get("HABITUS_BENCH_FRESHNESS_RATE", "200"))
PROBE_GAP = 0.2  # seconds between one probe seen and the next one posted
POLL = 0.02
BATCH = 20  # background turns per POST
# a background user posts a turn every BACKGROUND_USERS / RATE seconds: with 200 users, every
# second, so none of them ever settles for the debounce and each is rebuilt by the maximum wait
BACKGROUND_USERS = int(os.environ.get("HABITUS_BENCH_FRESHNESS_USERS", "200"))
TIMEOUT = 30.0
#: what a probe user says once (a different language per probe, so none is another's)
PROBE_LANGUAGES = (("Portuguese", "pt"), ("Italian", "it"), ("Dutch", "nl"), ("German", "de"),
                   ("French", "fr"), ("Spanish", "es"), ("Japanese", "ja"))


def turn(user: str, n: int, message: str) -> dict[str, Any]:
    at = time.time() - 1  # observed before the rebuild's as_of
    return {"type": "TurnRecorded", "user_id": user, "payload": {
        "session_id": f"s-{user}", "turn_id": f"t{n}", "channel": "web",
        "user_message": message, "assistant_message": "Sure, here it is. " * 6,
        "user_at": at, "assistant_at": at + 0.5}}


class Background:
    """Turns for other users at a fixed rate; counts what the gateway accepted."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str]):
        self.client, self.headers = client, headers
        self.accepted = 0
        self.started = 0.0
        self.stopped = 0.0
        self._n = itertools.count()

    def _batch(self) -> list[dict[str, Any]]:
        items = []
        for _ in range(BATCH):
            n = next(self._n)
            user = f"bg{n % BACKGROUND_USERS}"
            message = ("Keep answers short please, no intro." if n % 5 == 0
                       else f"Can you look at ticket {n} again please")
            items.append(turn(user, n, message))
        return items

    async def run(self, stop: asyncio.Event) -> None:
        self.started = time.monotonic()
        interval = BATCH / RATE if RATE > 0 else None
        next_at = self.started
        while interval is not None and not stop.is_set():
            response = await self.client.post("/v1/events", json=self._batch(),
                                              headers=self.headers)
            assert response.status_code == 200, response.text[:300]
            self.accepted += int(response.json()["accepted"])
            next_at += interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        await stop.wait()
        self.stopped = time.monotonic()

    @property
    def rate(self) -> float:
        return self.accepted / max(self.stopped - self.started, 1e-9)


async def probe(client: httpx.AsyncClient, headers: dict[str, str], user: str) -> float:
    """Seconds from the ingest's 200 to the first prompt.context showing a preference the user
    stated once, in plain words (inf: not within TIMEOUT)."""
    language, tag = PROBE_LANGUAGES[sum(map(ord, user)) % len(PROBE_LANGUAGES)]
    response = await client.post("/v1/events", headers=headers, json=[
        turn(user, 1, f"I'd rather you answer in {language}.")])
    answered = time.monotonic()
    assert response.status_code == 200, response.text[:300]
    body = {"user_id": user}
    expected = f"**style/language**: {tag}"
    while True:
        r = await client.post("/v1/rpc/prompt.context", json=body, headers=headers)
        assert r.status_code == 200, r.text[:300]
        if expected in r.json()["result"]["text"]:
            return time.monotonic() - answered
        if time.monotonic() - answered > TIMEOUT:
            return math.inf  # reported as not reflected, and counted as slower than any
        await asyncio.sleep(POLL)


async def scheduling_delay(nc: Any, tenant: str, user: str) -> float:
    """Seconds from the probe's candidates (their event time: the gateway's clock at ingest) to
    the scheduler's request to rebuild the user (its tick time)."""
    candidates = await events_on(nc, EVENTS, f"habitus.v1.event.CandidateEmitted.{tenant}.{user}.>")
    requests = await events_on(nc, EVENTS, f"habitus.v1.event.RebuildRequested.{tenant}.{user}.>")
    if not candidates or not requests:
        return math.inf
    return min(r.occurred_at for r in requests) - max(c.occurred_at for c in candidates)


@pytest.mark.timeout(900)
async def test_freshness_from_ingest_to_prompt_context(servers: ServerUrls, pool: Any, nc: Any,
                                                       record: Any) -> None:
    migrate(servers.database)
    settings = servers.settings(rate_limit_per_minute=0, log_level="WARNING")
    learning_settings = LearningSettings()  # the defaults, scheduler on
    assert learning_settings.scheduler_enabled
    tenant = unique("fresh")
    key = await create_key(pool, tenant)
    headers = {"Authorization": f"Bearer {key}"}
    async with running(producers(), settings), \
            running(learning(learning_settings), settings), \
            running(profile_renderer(), settings), \
            running(gateway, settings) as host:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{host.bound_port}",
                                     timeout=30, limits=limits, verify=TLS) as client:
            # warm-up: connections, code paths, and whatever earlier benches left for the
            # scheduler (its first tick also requests a periodic rebuild)
            await probe(client, headers, "warmup0")
            await probe(client, headers, "warmup1")

            stop = asyncio.Event()
            background = Background(client, headers)
            load = asyncio.create_task(background.run(stop))
            await asyncio.sleep(2.0)  # the load reaches a steady state first

            latencies = []
            try:
                for i in range(PROBES):  # one at a time: the polling is a constant load
                    latencies.append(await probe(client, headers, f"probe{i}"))
                    await asyncio.sleep(PROBE_GAP)
            finally:
                stop.set()
                await load

    delays = [await scheduling_delay(nc, tenant, f"probe{i}") for i in range(PROBES)]
    debounce = learning_settings.debounce_seconds
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print("\n[freshness] per probe (total s, scheduled s): " + ", ".join(
        f"{_s(t)}/{_s(d)}" for t, d in zip(latencies, delays, strict=True)))
    record("freshness", probes=PROBES, background_turns_per_s=round(background.rate, 1),
           background_users=BACKGROUND_USERS, debounce_s=debounce,
           max_wait_s=learning_settings.max_wait_seconds,
           tick_s=learning_settings.scheduler_tick_seconds,
           p50_s=_s(p50), p99_s=_s(p99), max_s=_s(max(latencies)),
           not_reflected=sum(1 for x in latencies if math.isinf(x)),
           # of which: until the scheduler asked (debounce + tick); the rest is the pipeline
           scheduled_p50_s=_s(statistics.median(delays)),
           scheduled_p99_s=_s(percentile(delays, 0.99)),
           p99_over_debounce=_s(p99 / debounce),
           target="a once-stated preference in prompt.context: p99 <= 3 s")


def _s(seconds: float) -> float | None:
    """Seconds for the results file: None for a probe never reflected."""
    return None if math.isinf(seconds) else round(seconds, 3)


async def tick_query_seconds(pool: Any, total: int, dirty: int) -> tuple[float, int]:
    """The scheduler's query over `total` users of which `dirty` have settled evidence: the
    median of 50 runs, and how many users it found."""
    now = time.time()
    async with pool.connection() as conn:
        await conn.execute("TRUNCATE learning.users")
        await conn.execute(
            """INSERT INTO learning.users (tenant_id, user_id, dirty, last_candidate_at,
                   last_candidate_seq, pending_since, last_as_of)
               SELECT 'bench', 'u' || g, g < %s, %s, g, %s, %s
               FROM generate_series(0, %s - 1) g""",
            (dirty, now - 60, now - 60, now - 3600, total))
        await conn.execute("ANALYZE learning.users")
        await conn.commit()
        runs = []
        found = 0
        async with conn.cursor() as cur:
            for _ in range(51):
                started = time.perf_counter()
                found = len(await store.settled_users(cur, now - 1.5, now - 10))
                runs.append(time.perf_counter() - started)
        await conn.execute("TRUNCATE learning.users")
        await conn.commit()
    return statistics.median(runs[1:]), found


async def test_scheduler_tick_follows_dirty_users(servers: ServerUrls, pool: Any, record: Any
                                                  ) -> None:
    """A tick every 0.25 s is only cheap if its query reads the dirty users, not all users."""
    migrate(servers.database)
    figures: dict[str, Any] = {}
    for total in (1_000, 100_000):
        for dirty in (0, 10):
            seconds, found = await tick_query_seconds(pool, total, dirty)
            assert found == dirty
            figures[f"users_{total // 1000}k_dirty_{dirty}_ms"] = round(seconds * 1e3, 3)
    figures["ratio_none_dirty"] = round(figures["users_100k_dirty_0_ms"]
                                        / figures["users_1k_dirty_0_ms"], 2)
    figures["ratio_10_dirty"] = round(figures["users_100k_dirty_10_ms"]
                                      / figures["users_1k_dirty_10_ms"], 2)
    record("learning_scheduler_tick", **figures, target="ratio <= 3")
