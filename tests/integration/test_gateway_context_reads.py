"""`prompt.context` cache hits answered by the gateway itself, on real servers.

The gateway, the profile renderer and a key of a tenant of their own; through HTTP. A cached
context is served without the renderer (proved by stopping it), a change turns the entry away
in the gateway as in the renderer (the gateway's memory of it included), and what needs the
renderer (a miss, a `request`, a bad parameter) still goes to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.runtime.embedded import free_port
from habitus.service.migrations import migrate
from habitus.telemetry.metrics import registry
from services.gateway.main import service as gateway
from services.profile_renderer.main import build as profile_renderer
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

NOTE = "I read answers on my phone, so keep code blocks narrow."


class Stack:
    """The gateway for the whole test, the renderer started and stopped as a test needs."""

    def __init__(self, servers: ServerUrls) -> None:
        self.settings = servers.settings()
        self._renderer: AsyncExitStack | None = None
        self.base = ""

    async def start_renderer(self) -> None:
        stack = AsyncExitStack()
        await stack.enter_async_context(running(profile_renderer(), self.settings))
        self._renderer = stack

    async def stop_renderer(self) -> None:
        assert self._renderer is not None
        await self._renderer.aclose()
        self._renderer = None


@pytest_asyncio.fixture
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    migrate(servers.database)
    s = Stack(servers)
    await s.start_renderer()
    try:
        async with running(gateway, s.settings) as host:
            s.base = f"http://127.0.0.1:{host.bound_port}"
            yield s
    finally:
        if s._renderer is not None:
            await s.stop_renderer()


@pytest_asyncio.fixture
async def client(stack: Stack, pool: Any) -> AsyncIterator[httpx.AsyncClient]:
    key = await create_key(pool, unique("acme"))
    async with httpx.AsyncClient(base_url=stack.base, verify=TLS, timeout=20,
                                 headers={"Authorization": f"Bearer {key}"}) as c:
        yield c


def served(outcome: str) -> float:
    return registry.get_sample_value("habitus_gateway_prompt_context_total",
                                     {"outcome": outcome}) or 0.0


def from_memory() -> float:
    return registry.get_sample_value("habitus_gateway_prompt_context_local_total") or 0.0


async def context(client: httpx.AsyncClient, **params: Any) -> httpx.Response:
    return await client.post("/v1/rpc/prompt.context", json=params)


async def test_a_cached_context_is_served_without_the_renderer_and_the_same(
        stack: Stack, client: httpx.AsyncClient) -> None:
    user = unique("dana")
    saved = await client.post("/v1/rpc/profile.save_notes", json={
        "user_id": user, "markdown": f"# User Profile\n\n{NOTE}\n", "base_version": 0})
    assert saved.status_code == 200, saved.text
    misses, hits = served("miss"), served("hit")
    first = await context(client, user_id=user, tools=["send_email"])
    assert first.status_code == 200, first.text
    assert NOTE in first.json()["result"]["text"]
    assert served("miss") == misses + 1  # built by the renderer, which cached it

    await stack.stop_renderer()
    again = await context(client, user_id=user, tools=["send_email"])
    assert again.status_code == 200, again.text
    assert again.json() == first.json()  # the renderer's answer, byte for byte as JSON
    assert served("hit") == hits + 1
    # what only the renderer can answer says it is unavailable, as before
    for params in ({"user_id": user, "tools": ["calendar"]},  # another variant: not cached
                   {"user_id": user, "tools": ["send_email"], "request": "Draft a reply"}):
        down = await context(client, **params)
        assert down.status_code == 503, down.text
        assert down.headers["Retry-After"].isdigit()
        assert down.json()["error"]["code"] == "unavailable"
    await stack.start_renderer()


async def test_a_change_turns_the_cached_entry_away_in_the_gateway(
        stack: Stack, client: httpx.AsyncClient) -> None:
    user = unique("eli")
    first = await context(client, user_id=user)
    assert first.status_code == 200, first.text
    assert NOTE not in first.json()["result"]["text"]
    assert first.headers["Server-Timing"] == "renderer"  # a miss: built
    local = from_memory()
    hits = [await context(client, user_id=user) for _ in range(3)]
    assert all(hit.json() == first.json() for hit in hits)
    # from Redis, kept, then from the gateway's memory (a second read from Redis when the
    # build's own write was told to the gateway while the first was under way)
    sources = [hit.headers["Server-Timing"] for hit in hits]
    assert sources in (["cache", "memory", "memory"], ["cache", "cache", "memory"]), sources
    assert from_memory() == local + sources.count("memory")

    saved = await client.post("/v1/rpc/profile.save_notes", json={
        "user_id": user, "markdown": f"# User Profile\n\n{NOTE}\n", "base_version": 0})
    assert saved.status_code == 200, saved.text
    # the save answers once the render committed: the very next reads show the note, all of
    # them, however many agents ask at once (their misses share builds, never an older one)
    after = await asyncio.gather(*(context(client, user_id=user) for _ in range(20)))
    assert {a.status_code for a in after} == {200}
    assert {a.text for a in after} == {after[0].text}
    assert NOTE in after[0].json()["result"]["text"]
    assert after[0].json()["result"]["version"] == saved.json()["result"]["version"]


async def test_bad_parameters_get_the_renderers_answer_naming_the_field(
        client: httpx.AsyncClient) -> None:
    forwarded = served("forwarded")
    bad = await context(client, user_id=unique("fay"), budget_chars=-1)
    assert bad.status_code == 400, bad.text
    assert "budget_chars" in bad.json()["error"]["message"]
    missing = await context(client, tools=["send_email"])
    assert missing.status_code == 400, missing.text
    assert "user_id" in missing.json()["error"]["message"]
    assert served("forwarded") == forwarded + 2


async def test_a_hit_served_by_the_gateway_spends_the_read_budget(
        servers: ServerUrls, stack: Stack, pool: Any) -> None:
    """The gateway reads the cache and charges the read at once; a hit is still a read, and an
    over-budget caller gets 429, with a cached entry or with a body that does not parse."""
    key = await create_key(pool, unique("acme"))
    settings = servers.settings(read_rate_limit_per_minute=3)
    if time.time() % 60 > 55:  # the limits count in one-minute windows: do not straddle one
        await asyncio.sleep(60 - time.time() % 60)
    async with running(gateway, settings) as host, httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{host.bound_port}", verify=TLS, timeout=20,
            headers={"Authorization": f"Bearer {key}"}) as client:
        user = unique("gus")
        hits = served("hit")
        answers = [await context(client, user_id=user) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert served("hit") == hits + 2  # the first built it, the next two were hits
        refused = await context(client, user_id=user)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"].isdigit()
        assert "3 reads per minute" in refused.json()["error"]["message"]
        bad = await client.post("/v1/rpc/prompt.context", content=b"{not json",
                                headers={"Content-Type": "application/json"})
        assert bad.status_code == 429, bad.text


async def test_with_its_redis_unreachable_the_gateway_forwards_and_the_read_is_answered(
        servers: ServerUrls, stack: Stack, pool: Any) -> None:
    """The charge and the entry read share one Redis round trip; when it fails the call is let
    through (the limiter is a cache) and the read counts as a miss the renderer answers."""
    key = await create_key(pool, unique("acme"))
    settings = servers.settings(redis_url=f"redis://127.0.0.1:{free_port()}/0",
                                read_rate_limit_per_minute=1)
    async with running(gateway, settings) as host, httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{host.bound_port}", verify=TLS, timeout=20,
            headers={"Authorization": f"Bearer {key}"}) as client:
        misses = served("miss")
        answers = [await context(client, user_id=unique("gus")) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200], answers[-1].text
    assert all("sections" in a.json()["result"] for a in answers)
    assert served("miss") == misses + 2  # over the budget of 1, yet not refused: no Redis
