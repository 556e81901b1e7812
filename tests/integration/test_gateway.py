"""The gateway over HTTP against real NATS, Postgres and Redis."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key, store_key
from habitus.bus.streams import INGEST
from habitus.events import CATALOG
from habitus.ids import new_event_id
from habitus.service.migrations import migrate
from habitus.subjects import ingest_subject, parse_subject
from services.gateway.main import service as gateway_spec
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
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
        INGEST, subjects_filter=f"habitus.v1.ingest.*.{tenant}.>"
    )
    return sum((info.state.subjects or {}).values())


async def post(url: str, key: str, body: Any, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10, verify=TLS) as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {**auth(key), "Content-Type": "application/json", **kw.pop("headers", {})}
        return await client.post("/v1/events", content=content, headers=headers, **kw)


async def test_accepted_turn_is_stored_in_ingest_stream(gateway: str, tenant: Any, nc: Any
                                                        ) -> None:
    name, key = tenant
    response = await post(gateway, key, [turn_item("alice", "Shorter please")])
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    assert result["status"] == "accepted"

    msg = await nc.jetstream().get_msg(INGEST, result["seq"])
    stored = json.loads(msg.data)
    assert parse_subject(msg.subject).published == ingest_subject("turn", name, "alice")
    assert stored["tenant_id"] == name
    assert stored["event_id"] == result["event_id"]
    # the user's words are sealed with their key on the stream; the envelope stays plain
    assert b"Shorter please" not in msg.data and stored["sealed"]["alg"] == "A256GCM"
    opened = CATALOG.decode_message(msg.data, msg.headers)
    assert opened.payload.user_message == "Shorter please"
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
        (lambda i: i["payload"].update(user_message="a\x00b"), 422, "payload.user_message"),
        (lambda i: i["payload"].update(assistant_message="\ud83d"), 422,
         "payload.assistant_message"),
        (lambda i: i["payload"].update(user_at=True), 422, "payload.user_at"),
        (lambda i: i["payload"].update(user_at="1764460800"), 422, "payload.user_at"),
        (lambda i: i.update(occurred_at=time.time() + 86_400), 422, "occurred_at"),
        (lambda i: i["payload"].update(assistant_at=time.time() + 86_400), 422,
         "payload.assistant_at"),
    ],
    ids=["unknown-type", "bad-user-id", "missing-field", "bad-event-id", "oversized",
         "unknown-field", "nul", "lone-surrogate", "bool-for-number", "string-for-number",
         "future-occurred-at", "future-payload-time"],
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
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
        missing = await client.post("/v1/events", json=[turn_item()])
        wrong = await client.post("/v1/events", json=[turn_item()], headers=auth("hab_nope"))
    assert missing.status_code == 401
    assert wrong.status_code == 401


async def test_a_tenant_key_cannot_touch_another_tenant(gateway: str, tenant: Any, pool: Any,
                                                        nc: Any) -> None:
    a_name, a_key = tenant
    b_name = unique("tn")
    await create_key(pool, b_name)
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
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
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
        unnamed = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                    headers=auth(admin))
        named = await client.post("/v1/rpc/echo.whoami", json={"user_id": "u"},
                                  headers=auth(admin, **{"X-Habitus-Tenant": target}))
    assert unnamed.status_code == 400
    assert "X-Habitus-Tenant" in unnamed.json()["error"]["message"]
    assert named.json()["result"]["tenant_id"] == target


async def test_rpc_errors_keep_their_shape_and_status(gateway: str, tenant: Any) -> None:
    _, key = tenant
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
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
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
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
    async with running(gateway_spec, settings) as host, httpx.AsyncClient(verify=TLS) as client:
        ready = await client.get(f"http://127.0.0.1:{host.bound_port}/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["service:nonexistent"] is not None


async def test_rpc_has_a_connection_apart_from_the_bulk_one_and_readyz_checks_both(
        servers: ServerUrls, migrated: None) -> None:
    """RPC is served and called on the broker's connection; pulls, acks and publishes on a
    second one, so a read never queues behind a batch in one socket. Losing either is not
    ready."""
    async with running(gateway_spec, servers.settings()) as host, \
            httpx.AsyncClient(verify=TLS) as client:
        ctx = host.ctx
        assert ctx is not None and ctx.rpc_nc is not None
        assert ctx.nc is not ctx.rpc_nc and ctx.nc.is_connected and ctx.rpc_nc.is_connected
        assert ctx.rpc._nc is ctx.rpc_nc  # calls to other services: the RPC connection
        ready = f"http://127.0.0.1:{host.bound_port}/readyz"
        assert (await client.get(ready)).status_code == 200
        await ctx.nc.close()  # the bulk connection gone: ingest could not publish
        lost = await client.get(ready)
    assert lost.status_code == 503 and lost.json()["checks"]["nats"] is not None


async def test_rate_limit_answers_429(servers: ServerUrls, migrated: None, pool: Any) -> None:
    settings = servers.settings(rate_limit_per_minute=3)
    key = await create_key(pool, unique("tn"))
    async with running(gateway_spec, settings) as host, httpx.AsyncClient(verify=TLS) as client:
        url = f"http://127.0.0.1:{host.bound_port}/v1/events"
        codes = [(await client.post(url, json=[turn_item()], headers=auth(key))).status_code
                 for _ in range(5)]
    assert codes[:3] == [200, 200, 200]
    assert 429 in codes[3:]


@pytest.mark.parametrize("levels", [150, 600, 5000])
async def test_deeply_nested_json_is_refused_naming_the_item(gateway: str, tenant: Any,
                                                             nc: Any, levels: int) -> None:
    """Before: 256+ levels answered 503 "retrying is safe", ~1,000 levels a 500."""
    name, key = tenant
    trace = {"type": "TraceCompleted", "user_id": "deb", "payload": {
        "trace_id": "tr", "query": "q", "agent": "a", "model": "m", "engine": "e", "result": "r",
        "started_at": 1_764_000_001, "ended_at": 1_764_000_002, "total_tokens": 1,
        "total_latency_seconds": 1,
        "steps": [{"step_type": "tool", "timestamp": 1_764_000_001, "duration_seconds": 0,
                   "output": "HERE"}]}}
    # Built as bytes: the test's own encoder would overflow its recursion on the deep ones.
    raw = json.dumps([turn_item("deb"), trace]).encode().replace(
        b'"HERE"', b'{"k": [' * levels + b'"leaf"' + b"]}" * levels)
    response = await post(gateway, key, raw)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_event"
    assert error["message"].startswith("item 1: payload.steps.0.output.k.0.k.0")
    assert "nested deeper than 64 levels" in error["message"]
    assert await subject_count(nc, name) == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", None])
async def test_a_body_that_is_not_json_is_415(gateway: str, tenant: Any, nc: Any,
                                              content_type: str | None) -> None:
    name, key = tenant
    headers = auth(key) | ({"Content-Type": content_type} if content_type else {})
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
        response = await client.post("/v1/events", headers=headers,
                                     content=json.dumps([turn_item()]).encode())
        rpc = await client.post("/v1/rpc/echo.whoami", headers=headers,
                                content=b'{"user_id": "u"}')
    for r in (response, rpc):
        assert r.status_code == 415, r.text
        assert r.json()["error"]["code"] == "unsupported_media_type"
    assert await subject_count(nc, name) == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [(b'{"user_id": "a\\u0000b"}', "user_id"), (b'{"user_id": "u", "fail": "\\udc01"}', "fail"),
     (b'{"user_id": "u", "x\\u0000": 1}', "x\\u0000"),
     (b'{"user_id": "u", "fail": ' + b"[" * 3000 + b"]" * 3000 + b"}", "fail.0.0")],
    ids=["nul", "surrogate", "nul-in-key", "deep"],
)
async def test_rpc_bodies_get_the_same_checks(gateway: str, tenant: Any, body: bytes,
                                              field: str) -> None:
    _, key = tenant
    async with httpx.AsyncClient(base_url=gateway, verify=TLS) as client:
        response = await client.post("/v1/rpc/echo.whoami", content=body,
                                     headers=auth(key, **{"Content-Type": "application/json"}))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_argument"
    assert response.json()["error"]["message"].startswith(field)


async def test_a_retry_without_event_id_is_a_duplicate_and_a_changed_one_a_conflict(
    gateway: str, tenant: Any, nc: Any
) -> None:
    name, key = tenant
    item = turn_item("eve", "Use metric units")
    first = await post(gateway, key, [item])
    again = await post(gateway, key, [item])
    assert first.json()["results"][0]["status"] == "accepted"
    assert again.status_code == 200, again.text
    assert again.json()["results"][0]["status"] == "duplicate"
    assert again.json()["results"][0]["event_id"] == first.json()["results"][0]["event_id"]

    changed = json.loads(json.dumps(item))
    changed["payload"]["user_message"] = "Use imperial units"
    other = turn_item("eve")
    conflict = await post(gateway, key, [changed, other])
    assert conflict.status_code == 409, conflict.text
    body = conflict.json()
    assert body["error"]["code"] == "conflict"
    assert "item 0" in body["error"]["message"]
    assert [r["status"] for r in body["results"]] == ["conflict", "accepted"]
    assert body["results"][0]["event_id"] in body["results"][0]["error"]
    # a different occurred_at (filled by the gateway) is not a different event
    late = await post(gateway, key, [{**item, "occurred_at": 1_700_000_999.0}])
    assert late.json()["results"][0]["status"] == "duplicate"
    assert await subject_count(nc, name) == 2


async def test_rate_limits_count_items_and_retry_after_matches(servers: ServerUrls,
                                                              migrated: None, pool: Any) -> None:
    settings = servers.settings(rate_limit_per_minute=5)
    key = await create_key(pool, unique("tn"))
    # The limits count in fixed one-minute windows: the four requests must fall in one, so a
    # start in a window's last ten seconds waits for the next (a straddle passed the second).
    if time.time() % 60 > 50:
        await asyncio.sleep(60 - time.time() % 60)
    async with running(gateway_spec, settings) as host:
        url = f"http://127.0.0.1:{host.bound_port}"
        ok = await post(url, key, [turn_item() for _ in range(3)])
        limited = await post(url, key, [turn_item() for _ in range(3)])
        too_big = await post(url, key, [turn_item() for _ in range(6)])
        fits = await post(url, key, [turn_item() for _ in range(2)])
    assert ok.status_code == 200
    assert limited.status_code == 429, limited.text
    retry_after = limited.headers["Retry-After"]
    assert f"retry in {retry_after}s" in limited.json()["error"]["message"]
    assert too_big.status_code == 413  # waiting can never help
    assert "Retry-After" not in too_big.headers
    assert fits.status_code == 200  # the refused batches used nothing up


async def test_an_item_over_the_bus_limit_is_413_not_retryable(servers: ServerUrls,
                                                               migrated: None, tenant: Any,
                                                               nc: Any) -> None:
    name, key = tenant
    settings = servers.settings(max_item_bytes=4 * 1024 * 1024)
    big = turn_item("fay", "x" * (nc.max_payload + 1))
    async with running(gateway_spec, settings) as host:
        response = await post(f"http://127.0.0.1:{host.bound_port}", key, [big])
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    assert "Retry-After" not in response.headers
    assert "retrying" not in response.text
    assert await subject_count(nc, name) == 0


async def test_every_error_has_the_json_shape_even_a_bug(servers: ServerUrls, migrated: None,
                                                         tenant: Any) -> None:
    _, key = tenant

    class Broken:
        async def publish_many(self, events: Any) -> Any:
            raise ZeroDivisionError("a bug")

    async with running(gateway_spec, servers.settings()) as host:
        assert host.ctx is not None
        host.ctx.publisher = Broken()  # type: ignore[assignment]
        url = f"http://127.0.0.1:{host.bound_port}"
        bug = await post(url, key, [turn_item()])
        async with httpx.AsyncClient(base_url=url, verify=TLS) as client:
            unknown_route = await client.get("/v1/nothing-here")
            bad_query = await client.post("/v1/events?partial=maybe", json=[turn_item()],
                                          headers=auth(key))
            wrong_method = await client.get("/v1/events", headers=auth(key))
    assert bug.status_code == 500
    assert bug.json()["error"]["code"] == "internal"
    assert "Traceback" not in bug.text and "Retry-After" not in bug.headers
    for response, status in ((unknown_route, 404), (bad_query, 400), (wrong_method, 405)):
        assert response.status_code == status, response.text
        assert set(response.json()["error"]) == {"code", "message"}, response.text


async def test_a_deep_body_that_is_not_a_list_is_not_blamed_on_an_item(gateway: str,
                                                                       tenant: Any) -> None:
    _, key = tenant
    response = await post(gateway, key, b'{"k": ' + b"[" * 100 + b"]" * 100 + b"}")
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("k.0.0")
