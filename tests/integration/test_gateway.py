"""The gateway over HTTP against real NATS, Postgres and Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key, store_key
from habitus.bus.streams import INGEST
from habitus.db.migrate import migrate
from habitus.ids import new_event_id
from habitus.subjects import ingest_subject
from services.gateway.main import service as gateway_spec
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.services import echo_spec, running

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def migrated(servers: ServerUrls) -> None:
    migrate(servers.database)


@pytest_asyncio.fixture(scope="module")
async def gateway(servers: ServerUrls, migrated: None) -> AsyncIterator[str]:
    settings = servers.settings(max_item_bytes=4096, max_body_bytes=64 * 1024,
                                max_batch_items=50, expected_services="echo")
    async with running(echo_spec(), settings), running(gateway_spec, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


@pytest_asyncio.fixture
async def tenant(pool: Any) -> tuple[str, str]:
    name = unique("tn")
    return name, await create_key(pool, name)


def auth(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


async def subject_count(nc: Any, tenant: str) -> int:
    """How many messages of this tenant HABITUS_INGEST holds."""
    info = await nc.jetstream().stream_info(
        INGEST, subjects_filter=f"habitus.v1.ingest.*.{tenant}.*"
    )
    return sum((info.state.subjects or {}).values())


async def post(url: str, key: str, body: Any, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.post("/v1/events", content=content, headers=auth(key), **kw)


async def test_accepted_turn_is_stored_in_ingest_stream(gateway: str, tenant: Any, nc: Any
                                                        ) -> None:
    name, key = tenant
    response = await post(gateway, key, [turn_item("alice", "Shorter please")])
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    assert result["status"] == "accepted"

    msg = await nc.jetstream().get_msg(INGEST, result["seq"])
    stored = json.loads(msg.data)
    assert msg.subject == ingest_subject("turn", name, "alice")
    assert stored["tenant_id"] == name
    assert stored["event_id"] == result["event_id"]
    assert stored["payload"]["user_message"] == "Shorter please"
    assert msg.headers["Nats-Msg-Id"] == f"{name}.alice.{result['event_id']}"


async def test_another_tenants_event_id_is_not_a_duplicate(gateway: str, tenant: Any,
                                                           pool: Any, nc: Any) -> None:
    name, key = tenant
    other = unique("tn")
    assert other != name
    other_key = await create_key(pool, other)
    item = turn_item("bob", event_id=new_event_id())
    mine = await post(gateway, key, [item])
    theirs = await post(gateway, other_key, [item])
    assert mine.json()["results"][0]["status"] == "accepted"
    assert theirs.json()["results"][0]["status"] == "accepted"
    assert await subject_count(nc, other) == 1


async def test_same_event_id_twice_is_reported_duplicate(gateway: str, tenant: Any, nc: Any
                                                         ) -> None:
    name, key = tenant
    item = turn_item("bob", event_id=new_event_id())
    first = await post(gateway, key, [item])
    second = await post(gateway, key, [item])
    assert first.json()["results"][0]["status"] == "accepted"
    assert second.status_code == 200
    assert second.json()["results"][0]["status"] == "duplicate"
    assert await subject_count(nc, name) == 1


@pytest.mark.parametrize(
    ("mutate", "status", "field"),
    [
        (lambda i: i.update(type="TurnHappened"), 422, "type"),
        (lambda i: i.update(user_id="bad id!"), 422, "user_id"),
        (lambda i: i["payload"].pop("user_message"), 422, "payload.user_message"),
        (lambda i: i.update(event_id="not-an-id"), 422, "event_id"),
        (lambda i: i["payload"].update(user_message="x" * 5000), 413, "item"),
        (lambda i: i.update(colour="blue"), 422, "colour"),
    ],
    ids=["unknown-type", "bad-user-id", "missing-field", "bad-event-id", "oversized",
         "unknown-field"],
)
async def test_bad_item_is_rejected_naming_the_field_and_nothing_is_published(
    gateway: str, tenant: Any, nc: Any, mutate: Any, status: int, field: str
) -> None:
    name, key = tenant
    good = turn_item("carol")
    bad = turn_item("carol")
    mutate(bad)
    response = await post(gateway, key, [good, bad])

    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] in ("invalid_event", "payload_too_large")
    assert f"item 1: {field}" in body["error"]["message"]
    assert [r["status"] for r in body["results"]] == ["not_published", "rejected"]
    assert field in [e["field"] for e in body["results"][1]["errors"]]
    assert await subject_count(nc, name) == 0  # not even the good item


async def test_partial_mode_publishes_the_valid_items_only(gateway: str, tenant: Any, nc: Any
                                                           ) -> None:
    name, key = tenant
    bad = turn_item("dan")
    bad["payload"].pop("turn_id")
    response = await post(gateway, key, [turn_item("dan"), bad], params={"partial": "true"})
    assert response.status_code == 207
    assert [r["status"] for r in response.json()["results"]] == ["accepted", "rejected"]
    assert await subject_count(nc, name) == 1


async def test_body_and_batch_limits(gateway: str, tenant: Any) -> None:
    _, key = tenant
    too_many = await post(gateway, key, [turn_item("e") for _ in range(51)])
    assert too_many.status_code == 413
    assert "limit is 50" in too_many.json()["error"]["message"]
    too_big = await post(gateway, key, b"[" + b" " * (70 * 1024) + b"]")
    assert too_big.status_code == 413
    not_json = await post(gateway, key, b"{nope")
    assert not_json.status_code == 400
    not_list = await post(gateway, key, {"type": "TurnRecorded"})
    assert not_list.status_code == 400
    assert "JSON list" in not_list.json()["error"]["message"]


async def test_requests_without_a_valid_key_are_refused(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as client:
        missing = await client.post("/v1/events", json=[turn_item()])
        wrong = await client.post("/v1/events", json=[turn_item()], headers=auth("hab_nope"))
    assert missing.status_code == 401
    assert wrong.status_code == 401


async def test_a_tenant_key_cannot_touch_another_tenant(gateway: str, tenant: Any, pool: Any,
                                                        nc: Any) -> None:
    a_name, a_key = tenant
    b_name = unique("tn")
    await create_key(pool, b_name)
    async with httpx.AsyncClient(base_url=gateway) as client:
        # naming tenant B in the header
        header = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                   headers=auth(a_key, **{"X-Habitus-Tenant": b_name}))
        # naming tenant B inside an ingest item
        item = await client.post("/v1/events", json=[{**turn_item(), "tenant_id": b_name}],
                                 headers=auth(a_key))
        # what A's RPC actually reaches
        own = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                headers=auth(a_key))
    assert header.status_code == 403
    assert item.status_code == 422
    assert item.json()["results"][0]["errors"][0]["field"] == "tenant_id"
    assert own.json() == {"result": {"tenant_id": a_name, "user_id": "u"}}
    assert await subject_count(nc, b_name) == 0


async def test_admin_key_must_name_the_tenant_it_acts_for(gateway: str, pool: Any) -> None:
    admin = "hab_admin_" + unique("k")
    await store_key(pool, "admin", admin, is_admin=True)
    target = unique("tn")
    async with httpx.AsyncClient(base_url=gateway) as client:
        unnamed = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                    headers=auth(admin))
        named = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                  headers=auth(admin, **{"X-Habitus-Tenant": target}))
    assert unnamed.status_code == 400
    assert "X-Habitus-Tenant" in unnamed.json()["error"]["message"]
    assert named.json()["result"]["tenant_id"] == target


async def test_rpc_errors_keep_their_shape_and_status(gateway: str, tenant: Any) -> None:
    _, key = tenant
    async with httpx.AsyncClient(base_url=gateway) as client:
        conflict = await client.post("/v1/rpc/echo.whoami",
                                     json={"user_id": "u", "fail": "conflict"}, headers=auth(key))
        bad = await client.post("/v1/rpc/echo.whoami", json={"nope": 1}, headers=auth(key))
        missing = await client.post("/v1/rpc/nobody.home", json={}, headers=auth(key))
        down = await client.post("/v1/rpc/learning.cache_stats", json={"user_id": "u"},
                                 headers=auth(key))
    assert conflict.status_code == 409
    assert conflict.json()["error"] == {
        "code": "conflict", "message": "asked to fail with conflict"
    }
    assert bad.status_code == 400
    assert "user_id" in bad.json()["error"]["message"]
    # a name outside the RPC table is the caller's mistake; a known method nobody serves is an
    # outage (no learning service runs beside this gateway)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert "learning.pin_facet, " in missing.json()["error"]["message"]
    assert down.status_code == 503
    assert down.json()["error"]["code"] == "unavailable"


async def test_health_ready_metrics_and_docs(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
        metrics_text = (await client.get("/metrics")).text
        docs = await client.get("/openapi.json")
    assert health.status_code == 200
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["checks"]) == {"nats", "postgres", "redis", "service:echo"}
    assert "habitus_gateway_http_request_duration_seconds_bucket" in metrics_text
    assert "faststream_received_messages_total" in metrics_text
    assert "/v1/events" in docs.json()["paths"]


async def test_readyz_is_503_while_an_expected_service_is_down(servers: ServerUrls,
                                                               migrated: None) -> None:
    settings = servers.settings(expected_services="nonexistent")
    async with running(gateway_spec, settings) as host, httpx.AsyncClient() as client:
        ready = await client.get(f"http://127.0.0.1:{host.bound_port}/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["service:nonexistent"] is not None


async def test_rate_limit_answers_429(servers: ServerUrls, migrated: None, pool: Any) -> None:
    settings = servers.settings(rate_limit_per_minute=3)
    key = await create_key(pool, unique("tn"))
    async with running(gateway_spec, settings) as host, httpx.AsyncClient() as client:
        url = f"http://127.0.0.1:{host.bound_port}/v1/events"
        codes = [(await client.post(url, json=[turn_item()], headers=auth(key))).status_code
                 for _ in range(5)]
    assert codes[:3] == [200, 200, 200]
    assert 429 in codes[3:]
