"""The prompt-context cache never serves an entry older than the user's last change.

The projection marks a user changed at an event's sequence before its batch commits; an entry
computed from data read at an earlier checkpoint no longer counts, without waiting for the
after-commit clean-up (which a crash can skip)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from habitus.context_cache import PREFIX, READ_CREDITS, read_key
from habitus.ids import TENANT_WIDE
from services.profile_renderer.cache import (
    ContextCache,
    Entry,
    Stamp,
    field_for,
    wanted_key,
)
from services.profile_renderer.contexts import Variant, latest_variants
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio
FIELD = field_for(None, None)


@pytest_asyncio.fixture
async def cache(servers: ServerUrls) -> AsyncIterator[ContextCache]:
    redis = Redis.from_url(servers.redis)
    yield ContextCache(redis, ttl_seconds=60)
    await redis.aclose()


async def test_an_entry_read_before_a_change_is_not_served_after_the_mark(
        cache: ContextCache) -> None:
    tenant = unique("tn")
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", FIELD, {"text": "old"}, generation, stamp=Stamp(5, 5))
    assert await cache.get(tenant, "u1", FIELD) == {"text": "old"}

    await cache.mark_changed({(tenant, "u1"): 7})  # the batch applying seq 7 is committing

    assert await cache.get(tenant, "u1", FIELD) is None
    # a reader that read the checkpoint before the commit still cannot make its entry count
    assert await cache.put(tenant, "u1", FIELD, {"text": "old"}, generation, stamp=Stamp(6, 6))
    assert await cache.get(tenant, "u1", FIELD) is None
    assert await cache.put(tenant, "u1", FIELD, {"text": "new"}, generation, stamp=Stamp(7, 7))
    assert await cache.get(tenant, "u1", FIELD) == {"text": "new"}


async def test_each_partitions_stamp_is_held_to_its_own_mark(cache: ContextCache) -> None:
    """With the renderer split, the user's partition and the tenant's (its tenant-wide rules)
    move apart: an entry is current when its user stamp reaches the user's mark and its tenant
    stamp the tenant's, never by comparing one partition's sequence with the other's."""
    tenant = unique("tn")
    await cache.mark_changed({(tenant, TENANT_WIDE): 150})  # a tenant rule at 150
    generation = await cache.generation(tenant, "u1")
    # the user's partition ran ahead (200), the tenant's had not applied the rule yet (140)
    assert await cache.put(tenant, "u1", FIELD, {"text": "no rule"}, generation,
                           stamp=Stamp(200, 140))
    assert await cache.get(tenant, "u1", FIELD) is None
    # the user's partition idle far behind (90), the tenant's past the rule: current
    assert await cache.put(tenant, "u1", FIELD, {"text": "with rule"}, generation,
                           stamp=Stamp(90, 160))
    assert await cache.get(tenant, "u1", FIELD) == {"text": "with rule"}
    await cache.mark_changed({(tenant, "u1"): 95})  # now the user changes at 95
    assert await cache.get(tenant, "u1", FIELD) is None


async def test_marks_only_grow_and_stay_per_user(cache: ContextCache) -> None:
    tenant = unique("tn")
    generation = await cache.generation(tenant, "u1")
    await cache.mark_changed({(tenant, "u1"): 9, (tenant, "u2"): 3})
    await cache.mark_changed({(tenant, "u1"): 4})  # a replayed, older batch
    assert await cache.put(tenant, "u1", FIELD, {"text": "at 8"}, generation, stamp=Stamp(8, 8))
    assert await cache.get(tenant, "u1", FIELD) is None
    other = await cache.generation(tenant, "u2")
    assert await cache.put(tenant, "u2", FIELD, {"text": "at 3"}, other, stamp=Stamp(3, 3))
    assert await cache.get(tenant, "u2", FIELD) == {"text": "at 3"}


async def test_invalidation_after_commit_turns_away_a_put_that_started_before_it(
        cache: ContextCache) -> None:
    tenant = unique("tn")
    before = await cache.generation(tenant, "u1")
    await cache.invalidate([(tenant, "u1")])
    assert not await cache.put(tenant, "u1", FIELD, {"text": "stale"}, before,
                                stamp=Stamp(100, 100))
    assert await cache.get(tenant, "u1", FIELD) is None


async def test_a_tenant_wide_mark_turns_away_every_users_earlier_entries(
        cache: ContextCache) -> None:
    tenant, other_tenant = unique("tn"), unique("tn")
    for t, user in ((tenant, "u1"), (tenant, "u2"), (other_tenant, "u1")):
        assert await cache.put(t, user, FIELD, {"text": f"{user} at 5"},
                               await cache.generation(t, user), stamp=Stamp(5, 5))

    await cache.mark_changed({(tenant, TENANT_WIDE): 8})  # a tenant rule's batch commits

    assert await cache.get(tenant, "u1", FIELD) is None
    assert await cache.get(tenant, "u2", FIELD) is None
    assert await cache.get(other_tenant, "u1", FIELD) == {"text": "u1 at 5"}
    # the after-commit clean-up keeps the tenant's mark: nothing else turns the entries away
    await cache.invalidate([(tenant, TENANT_WIDE)])
    assert await cache.get(tenant, "u1", FIELD) is None
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", FIELD, {"text": "at 7"}, generation, stamp=Stamp(7, 7))
    assert await cache.get(tenant, "u1", FIELD) is None
    assert await cache.put(tenant, "u1", FIELD, {"text": "at 8"}, generation, stamp=Stamp(8, 8))
    assert await cache.get(tenant, "u1", FIELD) == {"text": "at 8"}
    # a user's own later mark still counts on top of the tenant's
    await cache.mark_changed({(tenant, "u1"): 9})
    assert await cache.get(tenant, "u1", FIELD) is None


async def test_the_tenant_mark_outlives_the_entries_it_turns_away(servers: ServerUrls) -> None:
    redis = Redis.from_url(servers.redis)
    try:
        short, long = ContextCache(redis, ttl_seconds=5), ContextCache(redis, ttl_seconds=600)
        tenant = unique("tn")
        await short.mark_changed({(tenant, TENANT_WIDE): 4})
        mark_key = f"habitus:profile:{tenant}:{TENANT_WIDE}:ctx"
        assert 0 < await redis.ttl(mark_key) <= 5
        assert await long.put(tenant, "u1", FIELD, {"text": "at 4"},
                              await long.generation(tenant, "u1"), stamp=Stamp(4, 4))
        assert await redis.ttl(mark_key) > 600  # past the new entry's TTL
    finally:
        await redis.aclose()


async def test_the_context_with_unconfirmed_facets_is_its_own_entry(cache: ContextCache) -> None:
    tenant = unique("tn")
    asked = field_for(["send_email"], 500, unconfirmed=True)
    plain = field_for(["send_email"], 500)
    assert asked != plain and plain == field_for(["send_email"], 500, unconfirmed=False)
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", asked, {"text": "with questions"}, generation,
                           Stamp(1, 1))
    assert await cache.get(tenant, "u1", plain) is None  # never served for the plain request
    assert await cache.put(tenant, "u1", plain, {"text": "plain"}, generation, Stamp(1, 1))
    assert await cache.get(tenant, "u1", asked) == {"text": "with questions"}
    assert await cache.get(tenant, "u1", plain) == {"text": "plain"}
    await cache.invalidate([(tenant, "u1")])  # a change drops both variants
    assert await cache.get(tenant, "u1", asked) is None
    assert await cache.get(tenant, "u1", plain) is None


async def test_a_missed_variant_is_recorded_until_the_user_is_erased(cache: ContextCache) -> None:
    """A miss records the variant it asked for with its entry, and a rebuild reads it back with
    the generation it must put under; a put turned away records nothing (a rebuild that lost
    the race to an erasure writes no key back); erasure leaves nothing under the user's name."""
    tenant = unique("tn")
    asked = Variant.of(["send_email"], 600, False)
    before = await cache.generation(tenant, "u1")
    await cache.invalidate([(tenant, "u1")])  # a commit: a put read before it is turned away
    assert not await cache.put(tenant, "u1", asked.field, {"text": "stale"}, before,
                               Stamp(1, 1), wanted=asked.recorded(90.0), credits=READ_CREDITS)
    assert await cache.wanted([(tenant, "u1")]) == {}
    assert await cache.put(tenant, "u1", asked.field, {"text": "now"},
                           await cache.generation(tenant, "u1"), Stamp(1, 1),
                           wanted=asked.recorded(100.0), credits=READ_CREDITS)
    assert await cache.put(tenant, "u2", FIELD, {"text": "built ahead"},
                           await cache.generation(tenant, "u2"), Stamp(1, 1))

    wanted = await cache.wanted([(tenant, "u1"), (tenant, "u2")])
    assert list(wanted) == [(tenant, "u1")]  # u2's put recorded no variant
    generation, recorded = wanted[(tenant, "u1")]
    assert generation == await cache.generation(tenant, "u1") != before
    assert latest_variants(recorded, window=60, limit=8, now=130.0) == [asked]
    assert latest_variants(recorded, window=10, limit=8, now=130.0) == []  # asked too long ago

    await cache.forget([(tenant, "u1")])
    assert await cache.wanted([(tenant, "u1")]) == {}
    assert await cache._redis.exists(wanted_key(tenant, "u1")) == 0
    # a rebuild that read the generation before the erasure puts nothing back
    assert await cache.put_many(tenant, "u1", generation, [Entry(
        asked.field, {"text": "late"}, Stamp(2, 2), wanted=asked.recorded(140.0),
        credits=2)]) == [False]
    assert await cache._redis.exists(wanted_key(tenant, "u1"),
                                     f"habitus:profile:{tenant}:u1:ctx") == 0


async def test_a_change_names_the_entries_with_rebuilds_left(cache: ContextCache) -> None:
    """What the projection builds again after a change: the entries a read gave rebuilds to
    (a hit, or the miss that built them) with how many they have left, not those built ahead
    with none left; and a read of an entry that is not there leaves no key behind (a hash
    without its TTL would never expire)."""
    tenant = unique("tn")
    by_miss, last_ahead, ahead_then_hit = (field_for(["git"], n, False) for n in (1, 2, 3))
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", by_miss, {"text": "a"}, generation, Stamp(1, 1),
                           credits=READ_CREDITS)
    for field in (last_ahead, ahead_then_hit):
        assert await cache.put(tenant, "u1", field, {"text": "b"}, generation, Stamp(1, 1),
                               credits=0)
    assert await cache.get(tenant, "u1", ahead_then_hit) == {"text": "b"}  # a hit

    assert await cache.invalidate([(tenant, "u1"), (tenant, "u2"), (tenant, TENANT_WIDE)]) == {
        (tenant, "u1"): {by_miss: READ_CREDITS, ahead_then_hit: READ_CREDITS}}
    assert await cache.get(tenant, "u1", by_miss) is None  # dropped: a read, and a miss
    assert await cache._redis.exists(f"habitus:profile:{tenant}:u1:ctx") == 0
    # built again ahead of a read with one rebuild left: the next change names it once more
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", by_miss, {"text": "a2"}, generation, Stamp(2, 2),
                           credits=1)
    assert await cache.invalidate([(tenant, "u1")]) == {(tenant, "u1"): {by_miss: 1}}
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", by_miss, {"text": "a3"}, generation, Stamp(3, 3),
                           credits=0)
    assert await cache.invalidate([(tenant, "u1")]) == {}


async def test_read_marks_live_apart_as_long_as_their_entries_and_go_with_them(
        cache: ContextCache) -> None:
    """A read's mark is written outside the prefix the gateways are told about (a read must
    not drop the answer it keeps), yet expires with the entries it is about, is spent by a
    change like the entries, and is erased with the user."""
    tenant = unique("tn")
    field = field_for(["git"], 1, False)
    assert not read_key(tenant, "u1").startswith(PREFIX)
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", field, {"text": "a"}, generation, Stamp(1, 1))
    assert await cache.get(tenant, "u1", field) == {"text": "a"}
    redis = cache._redis
    assert await redis.hget(read_key(tenant, "u1"), field) == str(READ_CREDITS).encode()
    assert 0 < await redis.ttl(read_key(tenant, "u1")) <= 60  # the fixture's TTL
    assert await cache.invalidate([(tenant, "u1")]) == {(tenant, "u1"): {field: READ_CREDITS}}
    assert await redis.exists(read_key(tenant, "u1")) == 0  # spent: a rebuild renews it
    generation = await cache.generation(tenant, "u1")
    assert await cache.put(tenant, "u1", field, {"text": "b"}, generation, Stamp(2, 2),
                           credits=READ_CREDITS - 1)
    assert await redis.hget(read_key(tenant, "u1"), field) == str(READ_CREDITS - 1).encode()
    await cache.forget([(tenant, "u1")])
    assert await redis.exists(read_key(tenant, "u1")) == 0


async def test_no_generation_is_handed_out_twice_so_an_erasure_cannot_revive_a_put(
        cache: ContextCache) -> None:
    """A put holding a generation read before an erasure (a miss or a rebuild still reading
    Postgres) finds nothing current after it, however many changes follow: generations come
    from one counter for every user, and a missing one matches no put. A per-user counter
    started again at 1, which such a put could hold, and wrote the erased data back."""
    tenant = unique("tn")
    seen = {await cache.generation(tenant, "u1")}
    await cache.invalidate([(tenant, "u1")])
    held = await cache.generation(tenant, "u1")  # a build starts
    seen.add(held)
    await cache.forget([(tenant, "u1")])  # the user is erased meanwhile
    assert not await cache.put(tenant, "u1", FIELD, {"text": "erased"}, held, Stamp(9, 9))
    assert not await cache.put(tenant, "u1", FIELD, {"text": "erased"}, "0", Stamp(9, 9))
    for _ in range(3):  # later changes of a new user under the same id
        await cache.invalidate([(tenant, "u1")])
        now = await cache.generation(tenant, "u1")
        assert now not in seen
        seen.add(now)
        assert not await cache.put(tenant, "u1", FIELD, {"text": "erased"}, held, Stamp(9, 9))
    assert await cache.get(tenant, "u1", FIELD) is None
    gen_key = f"habitus:profile:{tenant}:u1:gen"
    assert 0 < await cache._redis.ttl(gen_key) <= 60  # no generation outlives its entries' TTL
