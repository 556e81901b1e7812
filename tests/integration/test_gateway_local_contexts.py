"""The gateway's memory of `prompt.context` answers, kept current by Redis's client tracking.

Real Redis throughout: the renderer's own cache writes (services.profile_renderer.cache) are
what must drop an answer, and the tracking connection is the gateway's. "The next request"
is modelled by one more round trip to Redis on another connection: whatever Redis pushed before
answering it has been applied by the time the round trip returns, as it has for a request
that arrives after a change was announced.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from habitus.context_cache import PREFIX, READ_CREDITS, answer, field_for, read_context, read_key
from habitus.ids import TENANT_WIDE
from habitus.runtime.embedded import free_port
from services.gateway.context_tracking import TrackingFeed
from services.gateway.local_contexts import LocalContexts
from services.gateway.ratelimit import LeasedBudget, RateLimiter
from services.profile_renderer.cache import ContextCache, Stamp
from tests.conftest import ServerUrls
from tests.support.factories import unique

FIELD = field_for(None, None)


def body(hit: dict[str, Any]) -> bytes:
    return json.dumps({"result": answer(hit)}).encode()


def text(body: bytes | None) -> str:
    assert body is not None
    return str(json.loads(body)["result"]["text"])


class Kept:
    """A gateway's memory and its tracking connection, with the renderer's cache beside."""

    def __init__(self, servers: ServerUrls, max_entries: int = 100) -> None:
        self.redis = Redis.from_url(servers.redis)
        self.cache = ContextCache(self.redis, ttl_seconds=60)
        self.feed = TrackingFeed(servers.redis, PREFIX, on_keys=lambda k: self.local.changed(k),
                                 on_reset=lambda: self.local.reset())
        self.local = LocalContexts(max_entries, self.feed)

    async def put(self, tenant: str, user: str, note: str, stamp: int = 5) -> None:
        generation = await self.cache.generation(tenant, user)
        assert await self.cache.put(tenant, user, FIELD, {"text": note}, generation,
                                    Stamp(stamp, stamp))

    async def read(self, tenant: str, user: str) -> bytes | None:
        """What the gateway's route does on a read: memory, else Redis (then kept)."""
        kept = self.local.get(tenant, user, FIELD)
        if kept is not None:
            return kept
        ticket = self.local.ticket()
        hit = await read_context(self.redis, tenant, user, FIELD)
        if hit is None:
            return None
        self.local.store(tenant, user, FIELD, body(hit), ticket)
        return body(hit)

    async def next_request(self) -> None:
        await self.redis.ping()

    async def keep(self, tenant: str, user: str) -> None:
        """Read once, and the answer is kept."""
        assert await self.read(tenant, user) is not None
        await self.next_request()
        assert self.local.get(tenant, user, FIELD) is not None


@pytest_asyncio.fixture
async def kept(servers: ServerUrls) -> AsyncIterator[Kept]:
    k = Kept(servers)
    k.feed.start()
    await asyncio.wait_for(k.feed.ready.wait(), 10)
    yield k
    await k.feed.stop()
    await k.redis.aclose()


@pytest.mark.asyncio
async def test_an_answer_is_kept_until_its_user_changes_and_the_mark_drops_it_at_once(
        kept: Kept) -> None:
    tenant = unique("tn")
    await kept.put(tenant, "ana", "terse answers")
    await kept.next_request()  # the put's own notice comes and goes before the read
    first = await kept.read(tenant, "ana")
    assert text(first) == "terse answers"
    await kept.next_request()
    # that read marked the entry read, under a prefix the gateway is not told about: what it
    # kept stays, and the next read after a change is the only one that goes to Redis
    assert await kept.redis.hget(read_key(tenant, "ana"), FIELD) == str(READ_CREDITS).encode()
    assert kept.local.get(tenant, "ana", FIELD) == first

    await kept.cache.mark_changed({(tenant, "ana"): 9})  # her change's batch is committing
    await kept.next_request()
    assert kept.local.get(tenant, "ana", FIELD) is None
    assert await kept.read(tenant, "ana") is None  # Redis turns the old entry away too


@pytest.mark.asyncio
async def test_a_tenant_wide_change_drops_every_user_of_that_tenant_only(kept: Kept) -> None:
    tenant, other = unique("tn"), unique("tn")
    for t, user in ((tenant, "ana"), (tenant, "ben"), (other, "ana")):
        await kept.put(t, user, f"{user} of {t}")
    await kept.next_request()
    for t, user in ((tenant, "ana"), (tenant, "ben"), (other, "ana")):
        await kept.keep(t, user)
    assert len(kept.local) == 3

    await kept.cache.mark_changed({(tenant, TENANT_WIDE): 8})  # a tenant rule commits
    await kept.next_request()
    assert kept.local.get(tenant, "ana", FIELD) is None
    assert kept.local.get(tenant, "ben", FIELD) is None
    assert text(kept.local.get(other, "ana", FIELD)) == f"ana of {other}"


@pytest.mark.asyncio
async def test_puts_for_one_user_leave_the_other_users_answers_kept(kept: Kept) -> None:
    """A put stretches the tenant's mark past its own TTL, but not on every put: a write of the
    tenant's hash would drop every answer of the tenant."""
    tenant = unique("tn")
    await kept.cache.mark_changed({(tenant, TENANT_WIDE): 3})  # the tenant has a rule
    await asyncio.sleep(1.1)  # the mark's TTL has ticked below a fresh entry's TTL
    await kept.put(tenant, "ana", "ana's")  # so this put stretches it
    await kept.next_request()
    await kept.keep(tenant, "ana")
    await asyncio.sleep(1.1)  # a second later it is still past a fresh entry's TTL
    await kept.put(tenant, "ben", "ben's")
    await kept.next_request()
    assert kept.local.get(tenant, "ana", FIELD) is not None


@pytest.mark.asyncio
async def test_a_read_that_a_change_overtook_keeps_nothing(kept: Kept) -> None:
    """The answer came back from Redis after the user's notice: it may predate the change."""
    tenant = unique("tn")
    await kept.put(tenant, "ana", "before")
    await read_context(kept.redis, tenant, "ana", FIELD)
    await kept.next_request()
    ticket = kept.local.ticket()
    hit = await read_context(kept.redis, tenant, "ana", FIELD)
    assert hit is not None
    await kept.cache.mark_changed({(tenant, "ana"): 9})
    await kept.next_request()
    assert not kept.local.store(tenant, "ana", FIELD, body(hit), ticket)
    assert kept.local.get(tenant, "ana", FIELD) is None
    # another user's notice does not stop this user's answer from being kept
    await kept.put(tenant, "ben", "ben's")
    await read_context(kept.redis, tenant, "ben", FIELD)  # marked read, as a first read does
    await kept.next_request()
    ticket = kept.local.ticket()
    hit = await read_context(kept.redis, tenant, "ben", FIELD)
    await kept.cache.mark_changed({(tenant, "ana"): 10})
    await kept.next_request()
    assert hit is not None and kept.local.store(tenant, "ben", FIELD, body(hit), ticket)


@pytest.mark.asyncio
async def test_an_erased_user_leaves_nothing_in_memory(kept: Kept) -> None:
    tenant = unique("tn")
    await kept.put(tenant, "ana", "Ana lives in Lisbon")
    await kept.next_request()
    await kept.keep(tenant, "ana")
    await kept.cache.forget([(tenant, "ana")])
    await kept.next_request()
    assert kept.local.get(tenant, "ana", FIELD) is None
    assert len(kept.local) == 0


@pytest.mark.asyncio
async def test_a_lost_tracking_connection_forgets_everything_and_tracks_again(
        kept: Kept) -> None:
    tenant = unique("tn")
    await kept.put(tenant, "ana", "kept")
    await kept.next_request()
    await kept.keep(tenant, "ana")
    ticket = kept.local.ticket()
    epoch = kept.feed.epoch
    kept.feed.drop_connection()
    # it reconnects by itself: one epoch for the loss, one for the new connection
    for _ in range(500):
        if kept.feed.live and kept.feed.epoch >= epoch + 2:
            break
        await asyncio.sleep(0.01)
    assert kept.feed.live and kept.feed.epoch >= epoch + 2
    assert len(kept.local) == 0  # a change told to nobody while it was down would be missed
    # an answer read under the old connection is not kept under the new one
    hit = await read_context(kept.redis, tenant, "ana", FIELD)
    assert hit is not None
    assert not kept.local.store(tenant, "ana", FIELD, body(hit), ticket)
    await kept.keep(tenant, "ana")
    # and changes are told again on the new connection
    await kept.cache.mark_changed({(tenant, "ana"): 9})
    await kept.next_request()
    assert kept.local.get(tenant, "ana", FIELD) is None


def test_nothing_is_served_from_memory_while_changes_are_not_told() -> None:
    class Tracking:
        live, epoch = True, 1

    tracking = Tracking()
    local = LocalContexts(10, tracking)
    assert local.store("t", "u", FIELD, b"x", local.ticket())
    tracking.live = False
    assert local.get("t", "u", FIELD) is None
    assert not local.store("t", "v", FIELD, b"y", local.ticket())


@pytest.mark.asyncio
async def test_with_redis_unreachable_the_feed_is_not_live_and_keeps_nothing() -> None:
    feed = TrackingFeed(f"redis://127.0.0.1:{free_port()}/0", PREFIX, on_keys=lambda k: None,
                        on_reset=lambda: None)
    local = LocalContexts(10, feed)
    feed.start()
    await asyncio.sleep(0.3)
    assert not feed.live
    assert not local.store("t", "u", FIELD, b"x", local.ticket())
    await feed.stop()


def test_a_flushed_database_forgets_everything() -> None:
    class Up:
        live, epoch = True, 1

    local = LocalContexts(10, Up())
    feed = TrackingFeed("redis://127.0.0.1:1/0", PREFIX, on_keys=local.changed,
                        on_reset=local.reset)
    assert local.store("t", "u", FIELD, b"x", local.ticket())
    feed.received([b"invalidate", [b"habitus:profile:t:other:ctx", b"habitus:profile:t:u:gen"]])
    assert local.get("t", "u", FIELD) == b"x"  # another user, and not an entries key
    feed.received([b"invalidate", None])
    assert local.get("t", "u", FIELD) is None


def test_memory_is_bounded_oldest_first_out() -> None:
    class Up:
        live, epoch = True, 1

    local = LocalContexts(3, Up())
    for user in ("a", "b", "c", "d"):
        assert local.store("t", user, FIELD, user.encode(), local.ticket())
    assert len(local) == 3
    assert local.get("t", "a", FIELD) is None
    assert local.get("t", "d", FIELD) == b"d"
    local.changed(["habitus:profile:t:_tenant:ctx"])
    assert len(local) == 0


@pytest.mark.asyncio
async def test_leased_reads_never_pass_the_limit_and_each_lease_is_one_round_trip(
        servers: ServerUrls) -> None:
    redis = Redis.from_url(servers.redis)
    if time.time() % 60 > 50:  # the limits count in one-minute windows: do not straddle one
        await asyncio.sleep(60 - time.time() % 60)
    limiter = RateLimiter(redis, 500, scope="read")
    leases = LeasedBudget(limiter, units=20)
    assert leases.units == 5  # a hundredth of the limit at most
    key = unique("key")
    answers = await asyncio.gather(*(leases.take(key) for _ in range(520)))
    assert sum(allowed for allowed, _ in answers) == 500
    assert all(0 < retry <= 61 for _, retry in answers)
    counter = await redis.get(f"habitus:rl:read:{key}:{int(time.time() // 60)}")
    assert counter is not None and int(counter) == 500  # refused units were given back
    # another key's budget is its own
    assert (await leases.take(unique("key")))[0]
    await redis.aclose()


@pytest.mark.asyncio
async def test_the_next_lease_is_fetched_before_the_last_is_used_up(servers: ServerUrls) -> None:
    """A read from memory waits no round trip for its charge: once a quarter of the lease is
    left, the next is taken in the background (the window's counter holds both), and the
    reads after it spend what was fetched."""
    redis = Redis.from_url(servers.redis)
    if time.time() % 60 > 50:  # the limits count in one-minute windows: do not straddle one
        await asyncio.sleep(60 - time.time() % 60)
    leases = LeasedBudget(RateLimiter(redis, 400, scope="read"), units=4)
    key = unique("key")

    async def counted() -> int:
        await asyncio.sleep(0.05)  # whatever was started in the background has landed
        value = await redis.get(f"habitus:rl:read:{key}:{int(time.time() // 60)}")
        return int(value or 0)

    for _ in range(2):
        assert (await leases.take(key))[0]
    assert await counted() == 4  # one lease, half of it left
    assert (await leases.take(key))[0]
    assert await counted() == 8  # a quarter left: the next one was fetched
    for _ in range(5):  # the last unit of the first and four of the second
        assert (await leases.take(key))[0]
    assert await counted() == 12  # and again, a quarter before the end
    await redis.aclose()
