"""Backpressure and the read budget, against real NATS, Postgres and Redis.

A projection lags for real: its durable consumer is read by a slow stand-in for its runner (ten
events a second, each acknowledged), so the gateway's poll measures the age of the oldest event
not yet applied straight from JetStream, as it does in production. The bound is one second, the
poll a tenth of one, so the whole module runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import nats
import pytest
import pytest_asyncio
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from habitus.auth.keys import create_key
from habitus.bus.streams import INGEST
from habitus.projection.base import subject_for
from habitus.service.migrations import migrate
from habitus.subjects import ingest_subject
from services.gateway.backpressure_monitor import Backpressure
from services.gateway.main import service as gateway_spec
from services.gateway.pipeline_lag import (
    Watched,
    consumers_of,
    projection_lag,
    watched_projections,
)
from services.gateway.tenant_load import TenantLoad
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.services import echo_spec, running

pytestmark = pytest.mark.asyncio

BOUND = 1.0


@pytest.fixture(scope="module")
def migrated(servers: ServerUrls) -> None:
    migrate(servers.database)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def turn_reader() -> Watched:
    """An installed projection reading turns from HABITUS_INGEST: the one made to lag."""
    turns = subject_for("TurnRecorded")
    return next(w for w in watched_projections() if w.stream == INGEST and turns in w.subjects)


class SlowRunner:
    """Reads a projection's durable consumer `per_fetch` events at a time, acknowledging each,
    as a projection that applies ten events a second would."""

    def __init__(self, js: Any, watched: Watched):
        self.js, self.watched = js, watched
        self.per_fetch = 1
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sub: Any = None

    async def start(self) -> None:
        w = self.watched
        with contextlib.suppress(NotFoundError):
            await self.js.delete_consumer(w.stream, w.durable)
        await self.js.add_consumer(w.stream, ConsumerConfig(
            durable_name=w.durable, filter_subjects=list(w.subjects),
            deliver_policy=DeliverPolicy.NEW, ack_policy=AckPolicy.EXPLICIT, ack_wait=30))
        self._sub = sub = await self.js.pull_subscribe_bind(w.durable, w.stream)

        async def run() -> None:
            # The loop ends on its flag, not only on a cancel: on Python 3.11 a cancel that
            # lands as nats-py's inner `wait_for` completes can be swallowed, and a loop that
            # only a cancel ends would then keep the fixture's teardown waiting for ever.
            while not self._stopping.is_set():
                # nats-py's fetch raises its own TimeoutError or, when its deadline runs out
                # before the request is sent, asyncio's: both mean "nothing this time".
                with contextlib.suppress(TimeoutError):
                    for msg in await sub.fetch(self.per_fetch, timeout=0.1):
                        await msg.ack()
                await asyncio.sleep(0.1)

        self._task = asyncio.create_task(run())

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, 5)
        if self._sub is not None:  # the session's connection drains at the end: leave nothing
            await self._sub.unsubscribe()
        with contextlib.suppress(NotFoundError):
            # The projection's own runner recreates it at its checkpoint on its next claim.
            await self.js.delete_consumer(self.watched.stream, self.watched.durable)


@pytest_asyncio.fixture
async def lagging(nc: Any) -> AsyncIterator[SlowRunner]:
    runner = SlowRunner(nc.jetstream(), turn_reader())
    await runner.start()
    yield runner
    await runner.stop()


async def test_the_burster_is_pushed_back_the_other_tenant_and_reads_pass(
        servers: ServerUrls, migrated: None, pool: Any, lagging: SlowRunner) -> None:
    settings = servers.settings(backpressure_lag_seconds=BOUND, backpressure_poll_seconds=0.1)
    burster, small = unique("tna"), unique("tnb")
    key_a, key_b = await create_key(pool, burster), await create_key(pool, small)
    shed_before = sample("habitus_gateway_backpressure_shed_requests_total",
                         reason="sole_tenant", projection=lagging.watched.projection)
    async with running(echo_spec(), settings), running(gateway_spec, settings) as host, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{host.bound_port}", timeout=10,
                              verify=TLS) as client:
        burst = await client.post("/v1/events", json=[turn_item("ann") for _ in range(50)],
                                  headers=auth(key_a))
        assert burst.status_code == 200, burst.text
        deadline = time.monotonic() + 8
        while True:  # the burster keeps sending until the pipeline's lag passes the bound
            refused = await client.post("/v1/events", json=[turn_item("ann")],
                                        headers=auth(key_a))
            if refused.status_code != 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert refused.status_code == 429, refused.text
        body = refused.json()
        retry_after = int(refused.headers["Retry-After"])
        assert 1 <= retry_after <= settings.backpressure_max_retry_after_seconds
        assert body["error"]["code"] == "rate_limited"
        assert body["error"]["message"].startswith("backpressure: the pipeline is ")
        assert f"(the largest part in {lagging.watched.projection})" in body["error"]["message"]
        assert body["error"]["message"].endswith(f"retry in {retry_after}s")
        details = body["backpressure"]
        assert details["projection"] == lagging.watched.projection
        assert details["lag_seconds"] > BOUND
        assert lagging.watched.projection in details["path"]
        assert details["share"] == details["fair_share"] == 1.0  # alone: the whole backlog
        assert sample("habitus_gateway_backpressure_shed_requests_total",
                      reason="sole_tenant",
                      projection=lagging.watched.projection) == shed_before + 1
        assert sample("habitus_gateway_pipeline_lag_seconds") > BOUND

        # The other tenant's one item is under its fair share: accepted, lag or not.
        other = await client.post("/v1/events", json=[turn_item("bob", "Keep answers short")],
                                  headers=auth(key_b))
        assert other.status_code == 200, other.text
        assert other.json()["results"][0]["status"] == "accepted"
        # Reads are never refused by backpressure, the burster's included.
        for key in (key_a, key_b):
            read = await client.post("/v1/rpc/echo.whoami", json={"user_id": "ann"},
                                     headers=auth(key))
            assert read.status_code == 200, read.text
        assert (await client.post("/v1/events", json=[turn_item("ann")],
                                  headers=auth(key_a))).status_code == 429

        # Once the projection catches up, the burster is let through again.
        lagging.per_fetch = 500
        deadline = time.monotonic() + 5
        while (again := await client.post("/v1/events", json=[turn_item("ann")],
                                          headers=auth(key_a))).status_code == 429:
            assert time.monotonic() < deadline, again.text
            await asyncio.sleep(0.1)
        assert again.status_code == 200, again.text


async def test_ingest_never_spends_the_read_budget(servers: ServerUrls, migrated: None,
                                                   pool: Any) -> None:
    settings = servers.settings(rate_limit_per_minute=2, read_rate_limit_per_minute=1)
    key = await create_key(pool, unique("tn"))
    if time.time() % 60 > 58:  # the limits count in one-minute windows: do not straddle one
        await asyncio.sleep(60 - time.time() % 60)
    async with running(echo_spec(), settings), running(gateway_spec, settings) as host, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{host.bound_port}", timeout=10,
                              verify=TLS) as client:
        ingest = [await client.post("/v1/events", json=[turn_item(), turn_item()],
                                    headers=auth(key)),
                  await client.post("/v1/events", json=[turn_item()], headers=auth(key))]
        read = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                 headers=auth(key))
        second_read = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                        headers=auth(key))
    assert [r.status_code for r in ingest] == [200, 429]
    assert "2 items per minute" in ingest[1].json()["error"]["message"]
    assert read.status_code == 200, read.text  # the write budget is spent, the read's is not
    assert second_read.status_code == 429
    assert "1 reads per minute" in second_read.json()["error"]["message"]
    assert "backpressure" not in second_read.json()


async def test_a_stopped_consumer_is_not_lag_a_consuming_one_is(nc: Any) -> None:
    js = nc.jetstream()
    tenant = unique("tn")
    w = Watched("test.lag", INGEST, unique("lagprobe"), (subject_for("TurnRecorded", tenant),))
    await js.add_consumer(INGEST, ConsumerConfig(
        durable_name=w.durable, filter_subject=w.subjects[0], deliver_policy=DeliverPolicy.NEW,
        ack_policy=AckPolicy.EXPLICIT))

    async def lag() -> float:
        consumers = await consumers_of(js, [INGEST])
        return await projection_lag(js, w, consumers, now=time.time(), active_within=BOUND)

    try:
        ack = await js.publish(ingest_subject("turn", tenant, "u"), b"{}")
        await asyncio.sleep(0.3)
        # Nothing read it: a stopped consumer (its service is down), not a slow one.
        assert await lag() == 0.0
        sub = await js.pull_subscribe_bind(w.durable, INGEST)
        [delivered] = await sub.fetch(1, timeout=2)  # delivered, not acknowledged: in progress
        assert 0.3 <= await lag() < 5.0
        assert delivered.metadata.sequence.stream == ack.seq
        await delivered.ack_sync()
        await sub.unsubscribe()
        assert await lag() == 0.0
    finally:
        await js.delete_consumer(INGEST, w.durable)


async def test_a_projection_is_as_late_as_its_slowest_partition(nc: Any) -> None:
    """Partitions have consumers of their own (`<durable>__p<i>of<n>`): the projection's lag
    is the slowest one's; another projection's consumers are not counted."""
    js = nc.jetstream()
    tenant = unique("tn")
    w = Watched("test.lag", INGEST, unique("lagparts"), (subject_for("TurnRecorded", tenant),))
    names = [f"{w.durable}__p0of2", f"{w.durable}__p1of2", f"{w.durable}x"]
    for name in names:
        await js.add_consumer(INGEST, ConsumerConfig(
            durable_name=name, filter_subject=w.subjects[0],
            deliver_policy=DeliverPolicy.NEW, ack_policy=AckPolicy.EXPLICIT))
    try:
        await js.publish(ingest_subject("turn", tenant, "u"), b"{}")
        await asyncio.sleep(0.3)
        slow = await js.pull_subscribe_bind(names[1], INGEST)
        await slow.fetch(1, timeout=2)  # delivered to partition 1, not acknowledged
        other = await js.pull_subscribe_bind(names[2], INGEST)
        await other.fetch(1, timeout=2)
        consumers = await consumers_of(js, [INGEST])
        assert 0.3 <= await projection_lag(js, w, consumers, now=time.time(),
                                           active_within=BOUND) < 5.0
        alone = Watched("test.lag", INGEST, names[0], w.subjects)
        assert await projection_lag(js, alone, consumers, now=time.time(),
                                    active_within=BOUND) == 0.0
        await slow.unsubscribe()
        await other.unsubscribe()
    finally:
        for name in names:
            await js.delete_consumer(INGEST, name)


async def test_an_unmeasurable_lag_lets_ingest_through(servers: ServerUrls) -> None:
    closed = await nats.connect(servers.nats)
    js = closed.jetstream()
    await closed.close()
    redis = Redis.from_url(servers.redis)
    try:
        settings = servers.settings(backpressure_lag_seconds=BOUND)
        bp = Backpressure(js, redis, settings, watched=[turn_reader()])
        bp.accepted("a", 1000)
        failures = sample("habitus_gateway_lag_measurement_failures_total")
        await bp.poll()
        await bp.poll()
        assert bp.lag is None
        assert sample("habitus_gateway_lag_measurement_failures_total") == failures + 2
        bp.check("a", 1)  # no exception: let through
    finally:
        await redis.aclose()


async def test_replicas_agree_through_redis_and_fall_back_to_their_own_counts(
        servers: ServerUrls) -> None:
    prefix = f"habitus:bp:{unique('t')}:"  # this test's own buckets in the shared Redis
    redis, other = Redis.from_url(servers.redis), Redis.from_url(servers.redis)
    down = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    try:
        now = time.time()
        first, second = TenantLoad(redis, prefix=prefix), TenantLoad(other, prefix=prefix)
        first.record("a", 90, now)
        second.record("b", 10, now)
        assert await first.flush(now) and await second.flush(now)
        assert await first.counts(30, now) == await second.counts(30, now) == {"a": 90, "b": 10}
        assert await first.counts(30, now + 1200) == {}  # past the history

        cut_off = TenantLoad(down, prefix=prefix)
        cut_off.record("a", 5, now)
        assert not await cut_off.flush(now)  # kept for later, ingest unaffected
        assert not cut_off.redis_ok
        assert await cut_off.counts(30, now) == {"a": 5}
    finally:
        for client in (redis, other, down):
            await client.aclose()
