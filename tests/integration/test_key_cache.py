"""The gateway's key cache, against the real key table."""

from __future__ import annotations

from typing import Any

import pytest
from cachetools import TTLCache

from habitus.auth.keys import create_key
from habitus.service.migrations import migrate
from services.gateway.auth import KeyCache
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio


async def test_a_cached_key_expiring_between_check_and_read_is_served_not_a_500(
        servers: ServerUrls, pool: Any) -> None:
    """The fuzzed gateway once answered 500 (KeyError): the cache was asked whether it held
    the key, then read, and the entry expired in between. One read decides now."""
    migrate(servers.database)
    key = await create_key(pool, unique("kc"))
    cache = KeyCache(pool, ttl=60)
    moved: list[float] = []

    def clock() -> float:  # still 0 while caching; then just fresh, then just expired
        if not moved:
            return 0.0
        return moved.pop(0) if len(moved) > 1 else moved[0]

    cache._fresh = TTLCache(16, 1.0, timer=clock)
    first = await cache.lookup(key)
    assert first is not None
    moved.extend([0.5, 1.5])
    again = await cache.lookup(key)
    assert again is not None and again.key_hash == first.key_hash
