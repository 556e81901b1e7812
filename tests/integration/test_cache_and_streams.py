"""The Redis cache wrapper and stream provisioning against real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from habitus.bus.streams import DLQ, EVENTS, INGEST, ensure_streams
from habitus.cache import Cache
from habitus.config import Settings
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def redis(servers: ServerUrls) -> AsyncIterator[Redis]:
    client = Redis.from_url(servers.redis)
    yield client
    await client.aclose()


async def test_cache_roundtrip_and_per_user_invalidation(redis: Redis) -> None:
    cache = Cache(redis, unique("ns"))
    await cache.set_json("t1", "alice", "ctx", value={"text": "hi"})
    await cache.set_json("t1", "alice", "ctx", "tools", value=[1, 2])
    await cache.set_json("t1", "bob", "ctx", value={"text": "bob's"})

    assert await cache.get_json("t1", "alice", "ctx") == {"text": "hi"}
    assert await cache.invalidate_user("t1", "alice") == 2
    assert await cache.get_json("t1", "alice", "ctx") is None
    assert await cache.get_json("t1", "bob", "ctx") == {"text": "bob's"}


async def test_cache_misses_instead_of_failing_when_redis_is_unreachable() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    cache = Cache(dead, "ns")
    assert await cache.get_json("t1", "alice", "ctx") is None
    assert await cache.set_json("t1", "alice", "ctx", value=1) is False
    await dead.aclose()


async def test_cache_rejects_ids_that_could_escape_the_namespace(redis: Redis) -> None:
    cache = Cache(redis, "ns")
    with pytest.raises(ValueError, match="user_id"):
        await cache.get_json("t1", "*", "ctx")


async def test_streams_are_ensured_idempotently_and_updated_on_change(nc: Any,
                                                                      settings: Settings) -> None:
    js = nc.jetstream()
    first = {r.name: r.action for r in await ensure_streams(js, settings)}
    assert set(first) == {INGEST, EVENTS, DLQ}
    assert set(first.values()) == {"unchanged"}  # the session fixture created them already

    longer = settings.model_copy(update={"raw_retention_days": 9.0})
    changed = {r.name: r.action for r in await ensure_streams(js, longer)}
    assert changed == {INGEST: "updated", EVENTS: "unchanged", DLQ: "unchanged"}
    assert (await js.stream_info(INGEST)).config.max_age == pytest.approx(9 * 86400)

    restored = {r.name: r.action for r in await ensure_streams(js, settings)}
    assert restored[INGEST] == "updated"
    info = await js.stream_info(EVENTS)
    assert info.config.deny_delete is True
    assert not info.config.max_age
