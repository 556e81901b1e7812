"""The gateway's edges, each sent through a real gateway over real HTTP (and, for slow bodies,
a raw socket): a body that trickles in, a gzip body, a key given twice, times before 2000 or
out of order, and the challenge on a 401. Each refusal names the field or header and publishes
nothing."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus.streams import INGEST
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway_spec
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.services import echo_spec, running

pytestmark = pytest.mark.asyncio
BODY_TIMEOUT = 1.5
SLOW_AFTER = 0.3
MAX_SLOW = 3


@pytest_asyncio.fixture(scope="module")
async def gateway(servers: ServerUrls) -> AsyncIterator[tuple[str, int]]:
    migrate(servers.database)
    settings = servers.settings(max_body_bytes=64 * 1024, expected_services="echo",
                                body_timeout_seconds=BODY_TIMEOUT,
                                slow_body_seconds=SLOW_AFTER, max_slow_bodies=MAX_SLOW)
    async with running(echo_spec(), settings), running(gateway_spec, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}", host.bound_port


@pytest_asyncio.fixture
async def tenant(pool: Any) -> tuple[str, str]:
    name = unique("edge")
    return name, await create_key(pool, name)


async def stored(nc: Any, tenant: str) -> int:
    info = await nc.jetstream().stream_info(INGEST,
                                            subjects_filter=f"habitus.v1.ingest.*.{tenant}.>")
    return sum((info.state.subjects or {}).values())


async def post(url: str, key: str | None, content: bytes, path: str = "/v1/events",
               **headers: str) -> httpx.Response:
    sent = {"Content-Type": "application/json", **headers}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    async with httpx.AsyncClient(base_url=url, timeout=10, verify=TLS) as client:
        return await client.post(path, content=content, headers=sent)


def turn(user: str, **payload: Any) -> dict[str, Any]:
    item = turn_item(user, "Please keep answers short.")
    item["payload"].update(payload)
    return item


# ------------------------------------------------------------------------------- slow bodies

async def trickle(port: int, key: str, declared: int, gap: float,
                  sent: int) -> tuple[float, bytes]:
    """A client that declares `declared` bytes and sends one every `gap` seconds (at most
    `sent` of them): the seconds until the gateway answered, and the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(f"POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
                 .encode())
    await writer.drain()

    async def drip() -> None:
        for _ in range(sent):
            await asyncio.sleep(gap)
            try:
                writer.write(b" ")
                await writer.drain()
            except ConnectionError:
                return

    dripping = asyncio.create_task(drip())
    try:
        answer = await asyncio.wait_for(reader.read(4096), timeout=20)
    finally:
        dripping.cancel()
        writer.close()
    return time.monotonic() - started, answer


async def test_a_body_that_never_arrives_whole_is_refused_with_408(
        gateway: tuple[str, int], tenant: tuple[str, str], nc: Any) -> None:
    (_, port), (name, key) = gateway, tenant
    took, answer = await trickle(port, key, declared=100, gap=0.25, sent=100)
    head = answer.decode(errors="replace")
    assert head.startswith("HTTP/1.1 408"), head
    assert "not received whole within 1.5s" in head and "close" in head.lower()
    assert BODY_TIMEOUT <= took < BODY_TIMEOUT + 3
    assert await stored(nc, name) == 0


async def test_slow_uploads_past_the_cap_are_cut_at_once_and_fast_ones_still_pass(
        gateway: tuple[str, int], tenant: tuple[str, str], nc: Any) -> None:
    (url, port), (name, key) = gateway, tenant
    slow = [asyncio.create_task(trickle(port, key, declared=100, gap=0.1, sent=100))
            for _ in range(MAX_SLOW + 4)]
    # while they trickle, an ordinary client is served
    await asyncio.sleep(SLOW_AFTER + 0.3)
    fast = await post(url, key, json.dumps([turn("fast")]).encode())
    assert fast.status_code == 200, fast.text
    answers = await asyncio.gather(*slow)
    cut = [took for took, answer in answers if b"slow uploads are already under way" in answer]
    timed_out = [took for took, answer in answers if b"not received whole" in answer]
    # MAX_SLOW were let go on until the timeout; every other one was cut when it became slow
    assert len(timed_out) == MAX_SLOW and len(cut) == 4, answers
    assert all(took < BODY_TIMEOUT for took in cut), cut
    assert await stored(nc, name) == 1


# -------------------------------------------------------------------------------- encodings

async def test_a_gzip_body_is_decoded_within_the_same_limits(
        gateway: tuple[str, int], tenant: tuple[str, str], nc: Any) -> None:
    (url, _), (name, key) = gateway, tenant
    items = [turn("gz", turn_id=f"gz-{n}") for n in range(3)]
    packed = gzip.compress(json.dumps(items).encode())
    ok = await post(url, key, packed, **{"Content-Encoding": "gzip"})
    assert ok.status_code == 200, ok.text
    assert [r["status"] for r in ok.json()["results"]] == ["accepted"] * 3
    # a bomb: 50 KB of gzip that decodes past the 64 KiB limit
    bomb = gzip.compress(json.dumps([turn("gz", assistant_message="x" * 200_000)]).encode())
    assert len(bomb) < 64 * 1024
    big = await post(url, key, bomb, **{"Content-Encoding": "gzip"})
    assert big.status_code == 413 and "the limit is 65536" in big.text
    broken = await post(url, key, packed[: len(packed) // 2], **{"Content-Encoding": "gzip"})
    assert broken.status_code == 400 and "gzip" in broken.json()["error"]["message"]
    garbage = await post(url, key, b"not gzip at all", **{"Content-Encoding": "gzip"})
    assert garbage.status_code == 400 and "not valid gzip" in garbage.text
    other = await post(url, key, packed, **{"Content-Encoding": "br"})
    assert other.status_code == 415
    assert "Content-Encoding: 'br' is not supported" in other.json()["error"]["message"]
    # gzip params of an RPC too
    params = gzip.compress(json.dumps({"user_id": "gz"}).encode())
    read = await post(url, key, params, path="/v1/rpc/echo.whoami",
                      **{"Content-Encoding": "gzip"})
    assert read.status_code == 200, read.text
    assert read.json()["result"] == {"tenant_id": name, "user_id": "gz"}
    assert await stored(nc, name) == 3


# ------------------------------------------------------------------------------- duplicates

async def test_a_key_given_twice_is_refused_naming_it(
        gateway: tuple[str, int], tenant: tuple[str, str], nc: Any) -> None:
    (url, _), (name, key) = gateway, tenant
    good = json.dumps(turn("dana"))
    twice = ('{"type": "TurnRecorded", "user_id": "dana", "user_id": "sam", "payload": '
             + json.dumps(turn("dana")["payload"]) + "}")
    refused = await post(url, key, f"[{good}, {twice}]".encode())
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert message.startswith("item 1: user_id: the key appears twice"), message
    nested = json.dumps([turn("dana")]).replace('"channel": "web"',
                                                '"channel": "web", "channel": "sms"')
    deep = await post(url, key, nested.encode())
    assert deep.status_code == 400
    assert "item 0: payload.channel: the key appears twice" in deep.text
    rpc = await post(url, key, b'{"user_id": "a", "user_id": "b"}', path="/v1/rpc/echo.whoami")
    assert rpc.status_code == 400 and "user_id: the key appears twice" in rpc.text
    assert await stored(nc, name) == 0


# ------------------------------------------------------------------------------------ times

@pytest.mark.parametrize(("payload", "field", "reason"), [
    ({"user_at": 0, "assistant_at": 0}, "payload.user_at", "before 2000-01-01T00:00:00Z"),
    ({"user_at": -0.0, "assistant_at": 1_764_000_000.0}, "payload.user_at",
     "before 2000-01-01T00:00:00Z"),
    ({"user_at": 1_764_000_000.0, "assistant_at": 1_763_999_000.0}, "payload.assistant_at",
     "is 1000s before payload.user_at"),
    ({"user_at": 1_764_000_000.0, "assistant_at": 1_764_000_001.0,
      "previous_assistant_at": 1_764_000_050.0}, "payload.user_at",
     "is 50s before payload.previous_assistant_at"),
    # milliseconds where seconds belong: far in the future
    ({"user_at": 1_764_000_000_000.0, "assistant_at": 1_764_000_000_500.0}, "payload.user_at",
     "in the future"),
])
async def test_times_before_2000_or_out_of_order_are_refused(
        gateway: tuple[str, int], tenant: tuple[str, str], nc: Any,
        payload: dict[str, Any], field: str, reason: str) -> None:
    (url, _), (name, key) = gateway, tenant
    refused = await post(url, key, json.dumps([turn("lee", **payload)]).encode())
    assert refused.status_code == 422, refused.text
    errors = refused.json()["results"][0]["errors"]
    assert any(e["field"] == field and reason in e["reason"] for e in errors), errors
    assert await stored(nc, name) == 0


async def test_ordinary_times_still_pass(gateway: tuple[str, int], tenant: tuple[str, str],
                                         nc: Any) -> None:
    (url, _), (name, key) = gateway, tenant
    now = time.time()
    same = turn("lee", user_at=now - 5, assistant_at=now - 5, previous_assistant_at=now - 20)
    ok = await post(url, key, json.dumps([same]).encode())
    assert ok.status_code == 200, ok.text
    assert await stored(nc, name) == 1


# ------------------------------------------------------------------------------------- 401

async def test_401_carries_the_bearer_challenge(gateway: tuple[str, int]) -> None:
    url, _ = gateway
    for key in (None, "hab_not-a-key-of-anyone"):
        for path in ("/v1/events", "/v1/rpc/echo.whoami"):
            answer = await post(url, key, b"[]", path=path)
            assert answer.status_code == 401, (path, answer.text)
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="habitus"'
