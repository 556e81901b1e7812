"""The gateway while NATS or Postgres is down: fail fast and say only what is true.

Each test that takes a server down starts its own embedded one on a temporary directory, never
the shared session servers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import BaseModel

from habitus.auth.keys import create_key, revoke
from habitus.bus import connect
from habitus.bus.publisher import EventPublisher, NotConfirmed, failure_kind
from habitus.bus.rpc import RpcContext, RpcRegistry
from habitus.bus.streams import INGEST
from habitus.db.pool import open_pool
from habitus.runtime.embedded import EmbeddedNats, EmbeddedPostgres
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway_spec
from tests.conftest import ServerUrls
from tests.support.factories import turn, turn_item, unique
from tests.support.http import TLS
from tests.support.services import running

pytestmark = pytest.mark.asyncio


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for a state the test needs (a bounded wait, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def post(url: str, key: str, body: Any, path: str = "/v1/events") -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=30, verify=TLS) as client:
        return await client.post(path, content=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})


async def tenant_messages(url: str, tenant: str) -> int:
    client = await connect(url, "tests-outage-check")
    try:
        info = await client.jetstream().stream_info(
            INGEST, subjects_filter=f"habitus.v1.ingest.*.{tenant}.>")
        return sum((info.state.subjects or {}).values())
    finally:
        await client.close()


@pytest.fixture(scope="module")
def migrated(servers: ServerUrls) -> None:
    migrate(servers.database)


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "own")
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- NATS down


async def test_nats_down_answers_503_at_once_and_the_item_never_appears_later(
    servers: ServerUrls, migrated: None, pool: Any, own_nats: EmbeddedNats
) -> None:
    """Before: the client buffered the publish during the reconnect, the gateway answered
    "could not be stored" after its ack timeouts, and the buffered copy was stored later."""
    tenant = unique("tn")
    key = await create_key(pool, tenant)
    settings = servers.settings(nats_url=own_nats.url)
    async with running(gateway_spec, settings) as host:
        assert host.ctx is not None
        nc = host.ctx.nc
        url = f"http://127.0.0.1:{host.bound_port}"
        before = await post(url, key, [turn_item("ann", "first")])
        assert before.status_code == 200, before.text

        own_nats.stop()
        await until(lambda: not nc.is_connected, "the gateway to see NATS gone")
        item = turn_item("ann", "sent during the outage")
        down = await post(url, key, [item])
        rpc = await post(url, key, {"user_id": "ann"}, path="/v1/rpc/learning.list_facets")

        own_nats.start()  # same port, same data
        await until(lambda: nc.is_connected, "the gateway to reconnect")
        await nc.flush(timeout=10)
        stored = await tenant_messages(own_nats.url, tenant)
        retried = await post(url, key, [item])

    assert down.status_code == 503, down.text
    assert down.headers["Retry-After"] == str(settings.retry_after_seconds)
    body = down.json()
    assert body["error"]["code"] == "unavailable"
    assert body["results"][0]["status"] == "not_stored"
    assert rpc.status_code == 503, rpc.text
    assert rpc.json()["error"]["code"] == "unavailable"
    assert "Retry-After" in rpc.headers
    assert stored == 1  # only the item sent before the outage
    # The same item again is new to the stream: it had never been stored.
    assert retried.status_code == 200, retried.text
    assert retried.json()["results"][0]["status"] == "accepted"


async def test_sent_but_unacknowledged_is_not_confirmed_not_not_stored(
    servers: ServerUrls, migrated: None, pool: Any, own_nats: EmbeddedNats
) -> None:
    """A publish that went out and got no ack may be stored: the answer must say so."""
    tenant = unique("tn")
    key = await create_key(pool, tenant)
    async with running(gateway_spec, servers.settings(nats_url=own_nats.url)) as host:
        assert host.ctx is not None
        ctx = host.ctx
        # Something takes the message and never acks it: no stream, a silent subscriber.
        await ctx.js.delete_stream(INGEST)
        silent = await ctx.nc.subscribe("habitus.v1.ingest.>")
        ctx.publisher = EventPublisher(ctx.js, timeout=0.3, attempts=2)
        response = await post(f"http://127.0.0.1:{host.bound_port}", key, [turn_item("bo")])
        await silent.unsubscribe()
    assert response.status_code == 504, response.text
    body = response.json()
    assert body["error"]["code"] == "deadline_exceeded"
    assert body["results"][0]["status"] == "not_confirmed"
    assert "retrying with the same event_id is safe" in body["results"][0]["error"]
    assert "Retry-After" in response.headers


async def test_publisher_failures_say_whether_the_event_may_be_stored(
    own_nats: EmbeddedNats
) -> None:
    nc = await connect(own_nats.url, "tests-publisher")
    try:
        publisher = EventPublisher(nc.jetstream(), timeout=0.3, attempts=2)
        event = turn("acme", "u1")
        [nobody] = await publisher.publish_many([event])  # no stream at all
        silent = await nc.subscribe("habitus.v1.ingest.>")
        [unacked] = await publisher.publish_many([event])
        await silent.unsubscribe()
        own_nats.stop()
        await until(lambda: not nc.is_connected, "the client to see NATS gone")
        [offline] = await publisher.publish_many([event])
        with pytest.raises(Exception) as single:
            await publisher.publish(event)
    finally:
        await nc.close()
    assert isinstance(nobody, Exception) and failure_kind(nobody) == "not_stored"
    assert isinstance(unacked, NotConfirmed) and failure_kind(unacked) == "not_confirmed"
    assert isinstance(offline, Exception) and failure_kind(offline) == "not_stored"
    assert failure_kind(single.value) == "not_stored"


# --------------------------------------------------------------------------- Postgres down


class NoParams(BaseModel):
    pass


def database_spec(holder: list[Any]) -> ServiceDescriptor:
    """A service whose method reads its database, as every real one does."""
    registry = RpcRegistry()

    @registry.method("dbcheck.read", NoParams)
    async def read(params: NoParams, ctx: RpcContext) -> dict[str, Any]:
        async with holder[0].connection(timeout=2) as conn:
            await conn.execute("SELECT 1")
        return {"ok": True}

    async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
        return Wiring(rpc=registry)

    return ServiceDescriptor(name="dbcheck", deploy_name="dbcheck", rpc_prefixes=("dbcheck",),
                             wire=wire)


@pytest_asyncio.fixture
async def own_postgres(tmp_path: Path) -> AsyncIterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path / "pg", extra_options={"fsync": "off"})
    await asyncio.to_thread(server.start)
    try:
        await asyncio.to_thread(migrate, server.url)
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def test_postgres_down_ingest_keeps_accepting_known_keys_and_the_rest_is_503(
    servers: ServerUrls, own_postgres: EmbeddedPostgres
) -> None:
    tenant = unique("tn")
    keys_pool = await open_pool(own_postgres.url, name="tests-keys")
    try:
        known = await create_key(keys_pool, tenant)
        never_used = await create_key(keys_pool, tenant)
        revoked = await create_key(keys_pool, tenant)
    finally:
        await keys_pool.close()
    # Fresh cache off: every request asks the database, so the outage is what answers.
    settings = servers.settings(database_url=own_postgres.url, key_cache_seconds=0)
    holder: list[Any] = []
    async with running(gateway_spec, settings) as host, \
            running(database_spec(holder), settings) as db_service:
        assert db_service.ctx is not None
        holder.append(db_service.ctx.pool)
        url = f"http://127.0.0.1:{host.bound_port}"
        up = await post(url, known, [turn_item("cy")])
        rpc_up = await post(url, known, {}, path="/v1/rpc/dbcheck.read")
        revoked_up = await post(url, revoked, [turn_item("cy")])
        await revoke(db_service.ctx.pool, revoked)
        revoked_seen = await post(url, revoked, [turn_item("cy")])

        await asyncio.to_thread(own_postgres.stop)
        accepted = await post(url, known, [turn_item("cy")])
        unknown = await post(url, never_used, [turn_item("cy")])
        garbage = await post(url, "hab_not_a_key_at_all", [turn_item("cy")])
        revoked_down = await post(url, revoked, [turn_item("cy")])
        rpc_down = await post(url, known, {}, path="/v1/rpc/dbcheck.read")
        async with httpx.AsyncClient(base_url=url, verify=TLS) as client:
            profile = await client.get("/v1/users/cy/profile.md",
                                       headers={"Authorization": f"Bearer {never_used}"})

    assert up.status_code == 200, up.text
    assert rpc_up.status_code == 200, rpc_up.text
    assert revoked_up.status_code == 200 and revoked_seen.status_code == 401
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["results"][0]["status"] == "accepted"
    # a key seen revoked is forgotten: the outage does not bring it back
    for response in (unknown, garbage, revoked_down, rpc_down, profile):
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "unavailable"
        assert response.headers["Retry-After"] == str(settings.retry_after_seconds)
    assert await tenant_messages(servers.nats, tenant) == 3
