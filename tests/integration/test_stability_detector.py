"""The stability-detector against real NATS and Postgres: candidates in, facets and
CacheRebuilt out, `learning.*` over RPC. Times are given as `as_of`."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import EventPublisher, RpcClient, RpcError
from habitus.bus.streams import EVENTS
from habitus.crypto.columns import COLUMNS
from habitus.events import CATALOG, Event
from habitus.events.domain import CandidateEmitted, RebuildRequested
from habitus.projection import ApplyContext, Delivered
from habitus.projection.replay import reset_projection
from habitus.projection.wait import wait_applied
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.profile_renderer.main import build as build_profile
from services.stability_detector.main import build
from services.stability_detector.projection import LearningProjection
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.own_servers import own_nc, own_pool, own_servers  # noqa: F401
from tests.support.services import running
from tests.support.statements import CountingCursor
from tests.support.streams import events_on

pytestmark = pytest.mark.asyncio
T0 = 1_700_000_000.0  # in the past: commands carry wall-clock times
DAY = 86_400.0
SETTINGS = LearningSettings(scheduler_enabled=False)


@pytest_asyncio.fixture(scope="module")
async def learning(servers: ServerUrls) -> AsyncIterator[None]:
    migrate(servers.database)
    # Commands answer once PROFILE.md and the prompt context reflect them: the renderer runs too.
    async with running(build(SETTINGS), servers.settings()), \
            running(build_profile(), servers.settings()):
        yield


class User:
    """One test user: publishes candidates and rebuilds, calls learning.*, reads CacheRebuilt."""

    def __init__(self, nc: Any, pool: Any):
        self.tenant = unique("tn")
        self.user = "u1"
        self.nc = nc
        self.pool = pool
        self.publisher = EventPublisher(nc.jetstream())
        self.rpc = RpcClient(nc)
        self.n = 0

    async def _publish(self, payload: Any, at: float) -> int:
        event = CATALOG.new(payload, tenant_id=self.tenant, user_id=self.user,
                            producer="tests", occurred_at=at)
        result = await self.publisher.publish(event)
        await wait_applied(self.pool, "learning", "learning.cache", result.seq)
        return result.seq

    async def candidate(self, key: str = "verbosity", value: str = "terse",
                        cue: str = "explicit", at: float = T0, facet_class: str = "style",
                        times: int = 1) -> None:
        for _ in range(times):
            self.n += 1
            await self._publish(CandidateEmitted.model_validate({
                "class": facet_class, "key": key, "value": value, "cue_family": cue,
                "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{self.n}"}],
                "initial_confidence": 0.9, "observed_at": at, "producer": "tests",
            }), at)

    async def rebuild(self, as_of: float) -> None:
        await self._publish(RebuildRequested(as_of=as_of, scope="user"), as_of)

    async def call(self, method: str, **params: Any) -> Any:
        return await self.rpc.call(f"learning.{method}", self.tenant,
                                   {"user_id": self.user, **params})

    async def facets(self, **params: Any) -> dict[str, tuple[str, str]]:
        result = await self.call("list_facets", **params)
        return {f"{f['class']}/{f['key']}": (f["value"], f["state"]) for f in result["facets"]}

    async def rebuilt_events(self) -> list[Event[Any]]:
        return await events_on(
            self.nc, EVENTS, f"habitus.v1.event.CacheRebuilt.{self.tenant}.{self.user}.>")


@pytest_asyncio.fixture
async def user(learning: None, nc: Any, pool: Any) -> User:
    return User(nc, pool)


async def test_five_explicit_become_active_and_a_quiet_rebuild_changes_nothing(user: User
                                                                              ) -> None:
    await user.candidate(times=5)
    await user.rebuild(T0)
    assert await user.facets() == {"style/verbosity": ("terse", "active")}
    events = await user.rebuilt_events()
    assert len(events) == 1
    payload = events[0].payload
    assert (payload.added, payload.evicted, payload.total_size) == (1, 0, 1)
    assert payload.active[0].value == "terse"
    assert payload.changes[0].new_state == "active"

    await user.rebuild(T0 + 60)
    assert await user.facets() == {"style/verbosity": ("terse", "active")}
    assert len(await user.rebuilt_events()) == 1  # no second CacheRebuilt


async def test_one_explicit_is_provisional_two_at_once_are_active(user: User) -> None:
    await user.candidate(key="preamble", value="skip")
    await user.rebuild(T0)
    facet = await user.call("get_facet", **{"class": "style", "key": "preamble"})
    assert facet["state"] == "provisional"
    assert facet["stability"] == pytest.approx(1.386, abs=1e-3)

    await user.candidate(key="emoji", value="skip", times=2)
    await user.rebuild(T0)
    facet = await user.call("get_facet", **{"class": "style", "key": "emoji"})
    assert facet["state"] == "active"
    assert facet["stability"] == pytest.approx(2.197, abs=1e-3)


async def test_decay_by_evidence_time(user: User) -> None:
    await user.candidate(times=2)
    await user.rebuild(T0)
    assert (await user.facets())["style/verbosity"][1] == "active"
    await user.rebuild(T0 + 14 * DAY)
    assert (await user.facets())["style/verbosity"][1] == "provisional"
    await user.rebuild(T0 + 28 * DAY)
    stats = await user.call("cache_stats")
    assert stats["candidate"] == 1 and stats["active"] == 0
    await user.rebuild(T0 + 42 * DAY)
    assert (await user.call("cache_stats"))["total"] == 0
    with pytest.raises(RpcError) as err:
        await user.call("get_facet", **{"class": "style", "key": "verbosity"})
    assert err.value.code == "not_found"


async def test_stronger_value_wins_a_conflict(user: User) -> None:
    await user.candidate(value="terse", times=3)
    await user.candidate(value="verbose", cue="behavioral")
    await user.rebuild(T0)
    assert await user.facets() == {"style/verbosity": ("terse", "active")}


async def test_budgets_keep_nine_of_ten_style_keys_active(user: User) -> None:
    for i in range(10):
        await user.candidate(key=f"k{i}", value="v", times=5)
    await user.rebuild(T0)
    stats = await user.call("cache_stats")
    assert (stats["active"], stats["provisional"]) == (9, 1)
    event = (await user.rebuilt_events())[-1].payload
    assert event.total_size == 9 and len(event.active) == 9


async def test_pin_survives_decay_and_update_pins(user: User) -> None:
    await user.candidate(times=2)
    await user.rebuild(T0)
    pinned = await user.call("pin_facet", **{"class": "style", "key": "verbosity"})
    assert pinned["user_state"] == "pinned" and pinned["state"] == "active"
    await user.rebuild(T0 + 3650 * DAY)
    assert (await user.facets())["style/verbosity"] == ("terse", "active")

    updated = await user.call("update_facet", **{"class": "identity", "key": "timezone",
                                                 "value": "CET"})
    assert (updated["value"], updated["user_state"], updated["state"]) == (
        "CET", "pinned", "active")
    events = await user.rebuilt_events()
    assert events[-1].payload.active[0].user_state == "pinned"


async def test_forgotten_stays_forgotten_after_new_evidence_and_rebuilds(user: User) -> None:
    await user.candidate(times=5)
    await user.rebuild(T0)
    forgotten = await user.call("forget_facet", **{"class": "style", "key": "verbosity"})
    assert forgotten["user_state"] == "forgotten"
    assert await user.facets() == {}

    await user.candidate(times=10, at=T0 + 100)
    await user.rebuild(T0 + 200)
    await user.rebuild(T0 + 300)
    assert await user.facets() == {}
    row = await user.call("get_facet", **{"class": "style", "key": "verbosity"})
    assert row["user_state"] == "forgotten"  # the tombstone is kept

    await user.call("unpin_facet", **{"class": "style", "key": "verbosity"})
    assert (await user.facets())["style/verbosity"] == ("terse", "active")


async def test_reset_keeps_pins_and_tombstones_and_nothing_else(user: User) -> None:
    for key in ("verbosity", "preamble", "emoji"):
        await user.candidate(key=key, value="x", times=5)
    await user.rebuild(T0)
    await user.call("pin_facet", **{"class": "style", "key": "verbosity"})
    await user.call("forget_facet", **{"class": "style", "key": "preamble"})

    await user.call("reset_cache")
    stats = await user.call("cache_stats")
    assert (stats["total"], stats["pinned"], stats["forgotten"]) == (1, 1, 1)
    assert await user.facets() == {"style/verbosity": ("x", "active")}

    await user.rebuild(T0 + 10)  # old evidence does not come back
    assert await user.facets() == {"style/verbosity": ("x", "active")}


async def test_list_facets_as_of_answers_the_past_and_explain_adds_up(user: User) -> None:
    await user.candidate(times=2)
    await user.rebuild(T0 + 30 * DAY)
    assert await user.facets() == {}  # decayed to candidate by now
    assert await user.facets(as_of=T0) == {"style/verbosity": ("terse", "active")}
    assert await user.facets(as_of=T0 - 1) == {}  # before any evidence

    explained = await user.call("explain_facet", **{"class": "style", "key": "verbosity",
                                                    "as_of": T0 + 10 * DAY})
    value = explained["values"][0]
    assert value["base"] == pytest.approx(sum(f["contribution"] for f in value["families"]))
    assert value["stability"] == pytest.approx(value["base"] * value["cue_multiplier"])
    assert explained["stability"] == pytest.approx(value["stability"])
    assert explained["state"] == "provisional"
    assert explained["next_state"] == "candidate"
    crossing = explained["next_change_at"]
    # 2·ln(3)·2^(-Δ/14 d) reaches the Provisional floor 0.7 at Δ = 14 d · log2(2·ln 3 / 0.7)
    assert crossing == pytest.approx(T0 + 14 * DAY * math.log2(2 * math.log(3) / 0.7))


async def test_bad_requests_are_clear_errors_and_change_nothing(user: User) -> None:
    await user.candidate(times=5)
    await user.rebuild(T0)
    cases = [
        ("get_facet", {"class": "mood", "key": "x"}, "invalid_argument", "class"),
        ("pin_facet", {"class": "style"}, "invalid_argument", "key"),
        ("forget_facet", {"class": "style", "key": "nope"}, "not_found", "style/nope"),
    ]
    for method, params, code, needle in cases:
        with pytest.raises(RpcError) as err:
            await user.call(method, **params)
        assert err.value.code == code
        assert needle in err.value.message
    with pytest.raises(RpcError) as err:
        await user.rpc.call("learning.list_facets", user.tenant, {})
    assert err.value.code == "invalid_argument" and "user_id" in err.value.message
    assert await user.facets() == {"style/verbosity": ("terse", "active")}
    assert len(await user.rebuilt_events()) == 1


async def test_a_candidate_seen_twice_counts_once(user: User) -> None:
    """The same CandidateEmitted stored twice (re-published past the duplicate window, so with
    two stream sequences) is one piece of evidence."""
    event = CATALOG.new(CandidateEmitted.model_validate({
        "class": "style", "key": "verbosity", "value": "terse", "cue_family": "explicit",
        "evidence": [], "initial_confidence": 0.9, "observed_at": T0, "producer": "tests",
    }), tenant_id=user.tenant, user_id=user.user, producer="tests", occurred_at=T0)
    js = user.nc.jetstream()
    subject = CATALOG.subject(event)
    first = await js.publish(subject, event.to_json(), headers={"Nats-Msg-Id": f"a{user.tenant}"})
    second = await js.publish(subject, event.to_json(), headers={"Nats-Msg-Id": f"b{user.tenant}"})
    assert second.seq > first.seq
    await wait_applied(user.pool, "learning", "learning.cache", second.seq)
    await user.candidate()  # and the intake keeps going
    await user.rebuild(T0)
    facet = await user.call("get_facet", **{"class": "style", "key": "verbosity"})
    assert facet["evidence_count"] == 2


async def test_facets_keep_provenance(user: User) -> None:
    await user.candidate(times=3)
    await user.rebuild(T0)
    facet = (await user.call("list_facets"))["facets"][0]
    assert facet["evidence_count"] == 3
    assert facet["cue_counts"] == {"explicit": 3}
    assert {e["turn_id"] for e in facet["evidence"]} == {"t1", "t2", "t3"}
    assert json.dumps(facet)  # JSON-safe (no infinities)


async def learning_rows(pool: Any) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    async with pool.connection() as conn:
        for table, order in (("evidence", "tenant_id, user_id, event_id"),
                             ("commands", "tenant_id, user_id, event_id"),
                             ("facets", "tenant_id, user_id, class, key"),
                             ("users", "tenant_id, user_id")):
            cur = await conn.execute(f"SELECT * FROM learning.{table} ORDER BY {order}")
            out[table] = await cur.fetchall()
    return out


async def cache_rebuilt_count(nc: Any) -> int:
    info = await nc.jetstream().stream_info(
        EVENTS, subjects_filter="habitus.v1.event.CacheRebuilt.>")
    return sum((info.state.subjects or {}).values())


@pytest.mark.slow
async def test_replay_from_sequence_one_gives_identical_rows_and_publishes_nothing(
    learning: None, servers: ServerUrls, nc: Any, pool: Any
) -> None:
    # A second replica joins and stands by: two replicas, one cache.
    async with running(build(SETTINGS), servers.settings()):
        for n in range(3):
            u = User(nc, pool)
            await u.candidate(times=3 + n)
            await u.candidate(key="timezone", value="PST", cue="structural",
                              facet_class="identity", times=5)
            await u.rebuild(T0)
            await u.call("pin_facet", **{"class": "style", "key": "verbosity"})
            await u.rebuild(T0 + 20 * DAY)
    before = await learning_rows(pool)
    published = await cache_rebuilt_count(nc)

    projection = LearningProjection(SETTINGS)
    await reset_projection(projection, pool)  # the live runner notices and rebuilds itself
    await wait_until_rebuilt(pool, before)

    assert await learning_rows(pool) == before
    assert await cache_rebuilt_count(nc) == published  # consequences are not re-published


async def wait_until_rebuilt(pool: Any, expected: dict[str, Any], timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (rows := await learning_rows(pool)) != expected:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"the projection did not rebuild to identical rows in {timeout}s: "
                + _first_difference(expected, rows))
        await asyncio.sleep(0.2)


def _first_difference(expected: dict[str, list[Any]], rows: dict[str, list[Any]]) -> str:
    """The first table whose rows differ, their counts and the first row that differs."""
    for table, want in expected.items():
        got = rows.get(table, [])
        if got != want:
            pair = next(((w, g) for w, g in zip(want, got, strict=False) if w != g), None)
            return (f"learning.{table} has {len(got)} rows, {len(want)} expected; first "
                    f"difference: {pair!r}")
    return "no table differs"


async def test_learning_over_http_is_scoped_to_the_callers_tenant(
    learning: None, servers: ServerUrls, pool: Any
) -> None:
    tenant_a, tenant_b = unique("ta"), unique("tb")
    key_a, key_b = await create_key(pool, tenant_a), await create_key(pool, tenant_b)
    async with running(gateway, servers.settings()) as host, httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{host.bound_port}", timeout=15, verify=TLS
    ) as client:
        set_a = await client.post(
            "/v1/rpc/learning.update_facet",
            json={"user_id": "alice", "class": "identity", "key": "timezone", "value": "CET"},
            headers={"Authorization": f"Bearer {key_a}"})
        seen_by_a = await client.post("/v1/rpc/learning.list_facets", json={"user_id": "alice"},
                                      headers={"Authorization": f"Bearer {key_a}"})
        seen_by_b = await client.post("/v1/rpc/learning.list_facets", json={"user_id": "alice"},
                                      headers={"Authorization": f"Bearer {key_b}"})
        forget_by_b = await client.post(
            "/v1/rpc/learning.forget_facet",
            json={"user_id": "alice", "class": "identity", "key": "timezone"},
            headers={"Authorization": f"Bearer {key_b}"})
    assert set_a.status_code == 200, set_a.text
    assert [f["value"] for f in seen_by_a.json()["result"]["facets"]] == ["CET"]
    assert seen_by_b.json()["result"]["facets"] == []
    assert forget_by_b.status_code == 404  # B cannot even see A's facet to forget it


def scheduler_for(user: User, **settings: Any) -> Any:
    from types import SimpleNamespace

    from services.stability_detector.scheduler import RebuildScheduler

    ctx = SimpleNamespace(pool=user.pool, publisher=user.publisher)
    return RebuildScheduler(ctx, LearningSettings(scheduler_enabled=False, **settings),  # type: ignore[arg-type]
                            last_periodic=T0 + 10 * DAY)


async def until(check: Any, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def users_row(user: User) -> tuple[Any, ...]:
    async with user.pool.connection() as conn:
        cur = await conn.execute("SELECT dirty, pending_since FROM learning.users "
                                 "WHERE tenant_id = %s AND user_id = %s", (user.tenant, user.user))
        row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def rebuild_requests(user: User) -> list[Event[Any]]:
    return await events_on(
        user.nc, EVENTS, f"habitus.v1.event.RebuildRequested.{user.tenant}.{user.user}.>")


async def test_the_scheduler_rebuilds_a_user_once_new_evidence_settled(user: User) -> None:
    scheduler = scheduler_for(user, debounce_seconds=60, max_wait_seconds=600)
    await user.candidate(times=5, at=T0)

    early = await scheduler.tick(T0 + 30)  # still settling
    assert not early.periodic
    assert await user.facets() == {}

    settled = await scheduler.tick(T0 + 61)
    assert settled.debounced >= 1  # (other tests' users may settle too)

    async def active() -> bool:
        return await user.facets() == {"style/verbosity": ("terse", "active")}

    await until(active)
    assert (await users_row(user))[0] is False  # rebuilt: nothing left to schedule
    await scheduler.stop()


async def test_a_burst_inside_the_debounce_is_one_rebuild_however_often_the_scheduler_ticks(
    user: User
) -> None:
    scheduler = scheduler_for(user, debounce_seconds=1.5, max_wait_seconds=10)
    for i in range(6):  # a burst: each candidate inside the previous one's debounce
        await user.candidate(times=1, at=T0 + 0.2 * i)
        await scheduler.tick(T0 + 0.2 * i + 0.1)
    assert await rebuild_requests(user) == []
    for k in range(8):  # the tick after settling and the next ones, before and after applying
        await scheduler.tick(T0 + 1 + 1.5 + 0.25 * k)

    async def rebuilt() -> bool:
        return (await users_row(user))[0] is False

    await until(rebuilt)
    await scheduler.tick(T0 + 5)
    assert len(await rebuild_requests(user)) == 1
    assert (await user.facets())["style/verbosity"][1] == "active"
    await scheduler.stop()


async def test_a_steady_stream_is_still_rebuilt_once_the_max_wait_ran_out(user: User) -> None:
    scheduler = scheduler_for(user, debounce_seconds=1.5, max_wait_seconds=5)
    for i in range(8):  # one candidate a second: it never settles for 1.5 s
        await user.candidate(key="emoji", value="skip", at=T0 + i)
        await scheduler.tick(T0 + i + 0.5)
        await scheduler.tick(T0 + i + 0.75)  # at once: before or after the first is applied
    # the max wait ran out at T0 + 5: one request, whichever tick saw it first
    requests = await rebuild_requests(user)
    assert len(requests) == 1
    assert requests[0].payload.as_of == T0 + 5.5
    assert requests[0].payload.reason == "new evidence waited the maximum"
    assert (await user.facets())["style/emoji"] == ("skip", "active")
    # what arrived after that rebuild waits again, since the first candidate after it
    assert await users_row(user) == (True, T0 + 6)
    await scheduler.stop()


async def test_pending_since_is_the_oldest_evidence_not_yet_rebuilt(user: User) -> None:
    stats = await user.call("cache_stats")
    assert stats["pending_since"] is None  # an unknown user: nothing waits
    await user.candidate(at=T0 + 20)
    await user.candidate(at=T0 + 10)  # an older one arriving later is the oldest
    await user.candidate(at=T0 + 30)
    assert (await user.call("list_facets"))["pending_since"] == T0 + 10
    assert (await user.call("cache_stats"))["pending_since"] == T0 + 10
    assert (await user.call("list_facets", as_of=T0 + 40))["pending_since"] is None

    await user.rebuild(T0 + 25)  # T0 + 30 is newer than the rebuild: still pending
    assert (await user.call("cache_stats"))["pending_since"] == T0 + 30
    await user.call("pin_facet", **{"class": "style", "key": "verbosity"})
    # a command rebuilds without moving the clock: the same evidence still waits, since then
    assert (await user.call("cache_stats"))["pending_since"] == T0 + 30

    await user.rebuild(T0 + 30)
    assert (await user.call("list_facets"))["pending_since"] is None
    assert (await user.call("cache_stats"))["pending_since"] is None
    rebuilt = await user.call("rebuild_cache")
    assert rebuilt["pending_since"] is None


async def test_evidence_stamped_ahead_of_its_arrival_is_rebuilt_once_its_time_passed(
        user: User) -> None:
    """A turn whose own time is a few seconds ahead of the gateway's (an agent's clock, a
    batch reported with its turns' times): a rebuild before that time cannot count it, so the
    user stays due, and the scheduler rebuilds once the time has passed the debounce."""
    scheduler = scheduler_for(user, debounce_seconds=1.5, max_wait_seconds=600)
    user.n += 1
    await user._publish(CandidateEmitted.model_validate({
        "class": "style", "key": "language", "value": "nl", "cue_family": "explicit",
        "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{user.n}"}],
        "initial_confidence": 0.9, "observed_at": T0 + 5, "producer": "tests",
        "stance": "declared", "sentence": "Respond in Dutch from now on.",
    }), T0)
    await user.rebuild(T0 + 2)  # before the statement's own time: it cannot count yet
    assert "style/language" not in await user.facets()
    assert (await users_row(user))[0] is True  # still due
    assert (await scheduler.tick(T0 + 4)).debounced == 0 or "style/language" not in (
        await user.facets())
    await scheduler.tick(T0 + 7)  # past the statement's time and the debounce

    async def set_by_user() -> bool:
        return (await user.facets()).get("style/language") == ("nl", "active")

    await until(set_by_user)
    await scheduler.stop()


async def test_rebuilds_fold_only_new_evidence_and_match_the_log(user: User, pool: Any) -> None:
    """The stored summaries, folded forward one rebuild at a time, give the cache the whole log
    gives: across evidence stamped ahead of the rebuild (it waits), a value overtaking another,
    a pin without a value and evidence applied out of log order (summarised again)."""
    from services.stability_detector import store
    from services.stability_detector.scoring import compute_cache

    async def state() -> store.SummaryState:
        async with pool.connection() as conn, conn.cursor() as cur:
            return await store.summary_state(cur, user.tenant, user.user)

    async def from_log(as_of: float) -> bool:
        async with pool.connection() as conn, conn.cursor() as cur:
            evidence = await store.load_evidence(cur, user.tenant, user.user)
            commands = await store.load_commands(cur, user.tenant, user.user)
            live = await store.load_facets(cur, user.tenant, user.user)
        expected = compute_cache(evidence, commands, as_of, SETTINGS, commands_as_of=math.inf)
        return {fk: (r.value, r.state, r.evidence_count, r.evidence_refs)
                for fk, r in live.items()} == {
            fk: (r.value, r.state, r.evidence_count, r.evidence_refs)
            for fk, r in expected.items()}

    await user.candidate(times=3)
    await user.rebuild(T0)
    first = await state()
    assert first.folded_seq is not None and first.deferred == ()
    # one piece stamped a day ahead: logged, waiting for its time
    await user.candidate(value="detailed", at=T0 + DAY)
    await user.candidate(value="detailed", cue="structural", at=T0 + 60, times=2)
    await user.rebuild(T0 + 120)
    second = await state()
    assert second.folded_seq is not None and first.folded_seq is not None
    assert second.folded_seq > first.folded_seq and len(second.deferred) == 1
    assert await from_log(T0 + 120)
    await user.rebuild(T0 + 2 * DAY)
    assert (await state()).deferred == ()
    assert await from_log(T0 + 2 * DAY)
    # a pin without a value holds what won then, recorded once
    await user.call("pin_facet", **{"class": "style", "key": "verbosity"})
    await user.candidate(value="terse", times=4, at=T0 + 2 * DAY)
    await user.rebuild(T0 + 2 * DAY + 60)
    assert await from_log(T0 + 2 * DAY + 60)
    # evidence applied below where the summaries have come: summarised from the log again
    async with pool.connection() as conn, conn.cursor() as cur:
        low = store.EvidenceRow(user.tenant, user.user, "out-of-order", 1, "style", "tone",
                                "plain", "explicit", T0, 0.9, "tests", "[]", T0)
        await store.insert_evidence(cur, [low])
        await conn.commit()
    assert (await state()).folded_seq is None
    await user.rebuild(T0 + 3 * DAY)
    assert (await state()).folded_seq is not None
    assert await from_log(T0 + 3 * DAY)


class HeldPublisher:
    """Records what the scheduler publishes and never delivers it: a projection that is
    behind, for as long as the test likes."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def publish_many(self, events: Any) -> list[Any]:
        self.ids.extend(e.event_id for e in events)
        return [None for _ in events]


async def test_a_request_on_its_way_is_not_published_again_every_tick(user: User) -> None:
    from types import SimpleNamespace

    from services.stability_detector.scheduler import RebuildScheduler

    held = HeldPublisher()
    scheduler = RebuildScheduler(
        SimpleNamespace(pool=user.pool, publisher=held),  # type: ignore[arg-type]
        LearningSettings(scheduler_enabled=False, debounce_seconds=1.5, max_wait_seconds=600,
                         request_repeat_seconds=30), last_periodic=T0 + 10 * DAY)
    await user.candidate(times=2, at=T0)
    ticks = [await scheduler.tick(T0 + 2 + 0.25 * k) for k in range(12)]  # three seconds
    assert all(t.debounced >= 1 for t in ticks)  # the user stays settled: nothing applied it
    # every settled user's request (this one's, and other tests' users still dirty) went out
    # once, not twelve times
    assert held.ids and set(Counter(held.ids).values()) == {1}
    assert sum(t.published for t in ticks) == len(held.ids)
    once = set(held.ids)
    later = await scheduler.tick(T0 + 2 + 31)  # past the repeat: published again (lost?)
    assert once <= set(held.ids[-later.published:])


async def test_a_quiet_rebuild_rewrites_no_row_yet_reads_show_the_decayed_score(user: User
                                                                               ) -> None:
    async def stored() -> tuple[float, float]:
        async with user.pool.connection() as conn:
            cur = await conn.execute(  # the key is sealed: so is the parameter
                "SELECT as_of, stability FROM learning.facets WHERE tenant_id = %s "
                "AND user_id = %s AND key = %s",
                (user.tenant, user.user, COLUMNS.seal(user.tenant, user.user, "verbosity")))
            row = await cur.fetchone()
        assert row is not None
        return float(row[0]), float(row[1])

    await user.candidate(times=6)
    await user.rebuild(T0)
    first = (await user.call("list_facets"))["facets"][0]["stability"]
    assert await stored() == (T0, pytest.approx(first))
    await user.rebuild(T0 + 3 * DAY)  # nothing new: decay alone
    assert (await stored())[0] == T0  # the row was left as it was
    later = (await user.call("list_facets"))["facets"][0]["stability"]
    assert later == pytest.approx(first * 2 ** (-3 / 14), abs=2e-6)  # style: 14-day half-life
    explained = await user.call("explain_facet", **{"class": "style", "key": "verbosity"})
    assert explained["stability"] == pytest.approx(later, abs=2e-6)


async def test_a_run_of_rebuild_requests_reads_its_users_together_and_matches_the_log(
        learning: None, nc: Any, pool: Any) -> None:
    """Rebuild requests for several users published at once (one run, the same user twice)
    read their inputs together: each user's cache is what the whole log gives, and the second
    rebuild of the same user saw what the first wrote (so it changed nothing and announced
    nothing; from the inputs read before the first, it would announce the change again)."""
    from services.stability_detector import store
    from services.stability_detector.scoring import compute_cache

    ann, bob = User(nc, pool), User(nc, pool)
    bob.tenant = ann.tenant  # one tenant, two users
    bob.user = "u2"
    await ann.candidate(times=3)
    await bob.candidate(key="tone", value="plain", times=2)
    await bob.rebuild(T0 + 10)
    await bob.call("pin_facet", **{"class": "style", "key": "tone"})  # holds what won: plain
    requests = [CATALOG.new(RebuildRequested(as_of=as_of, scope="user"), tenant_id=u.tenant,
                            user_id=u.user, producer="tests", occurred_at=as_of)
                for u, as_of in ((ann, T0 + 60), (bob, T0 + 60), (ann, T0 + 60))]
    results = await ann.publisher.publish_many(requests)
    await wait_applied(pool, "learning", "learning.cache",
                       max(r.seq for r in results if not isinstance(r, Exception)))

    async with pool.connection() as conn, conn.cursor() as cur:
        read = await store.rebuild_inputs(cur, [(ann.tenant, "u1"), (bob.tenant, "u2"),
                                                (ann.tenant, "u1"), (ann.tenant, "nobody")])
        assert list(read) == [(ann.tenant, "u1"), (bob.tenant, "u2"), (ann.tenant, "nobody")]
        inputs = {user: got for user, got in read.items() if got is not None}
        assert inputs.keys() == read.keys()  # None: a user whose keys were destroyed
        for u, as_of in ((ann, T0 + 60), (bob, T0 + 60)):
            got = inputs[(u.tenant, u.user)]
            assert got.state.last_as_of == as_of
            evidence = await store.load_evidence(cur, u.tenant, u.user)
            expected = compute_cache(evidence, got.commands, as_of, SETTINGS,
                                     commands_as_of=math.inf)
            assert {fk: (r.value, r.state, r.evidence_count) for fk, r in got.facets.items()} \
                == {fk: (r.value, r.state, r.evidence_count) for fk, r in expected.items()}
            assert got.facets == await store.load_facets(cur, u.tenant, u.user)
            assert got.stats.keys() == (await store.load_stats(cur, u.tenant, u.user)).keys()
        assert inputs[(bob.tenant, "u2")].facets[("style", "tone")].value == "plain"
        assert [c.kind for c in inputs[(bob.tenant, "u2")].commands] == ["pin"]
        nobody = inputs[(ann.tenant, "nobody")]
        assert (nobody.state, nobody.commands, nobody.facets, nobody.stats) == (
            store.SummaryState(None, None, (), None), [], {}, {})
    assert [e.payload.as_of for e in await ann.rebuilt_events()] == [T0 + 60]


async def test_a_periodic_rebuild_survives_a_user_whose_summary_will_not_parse(
        learning: None, nc: Any, pool: Any) -> None:
    """The due users' inputs are read together; when one user's stored summary is corrupt,
    that read fails, each user then reads their own, and only the bad one is left due."""
    from services.stability_detector import store

    good, bad = User(nc, pool), User(nc, pool)
    bad.tenant = good.tenant
    bad.user = "u2"
    for u in (good, bad):
        await u.candidate(times=3)
        await u.rebuild(T0)
        await u.candidate(times=2, at=T0 + 60)  # new evidence: due at the next periodic
    async with pool.connection() as conn:
        await conn.execute(
            f"UPDATE {store.VALUE_STATS} SET stats = jsonb_set(stats, '{{m}}', '\"many\"') "
            "WHERE tenant_id = %s AND user_id = %s", (bad.tenant, bad.user))
    event = CATALOG.new(RebuildRequested(as_of=T0 + 120, scope="periodic", reason="periodic"),
                        tenant_id="_system", user_id="_all", producer="tests",
                        occurred_at=T0 + 120)
    result = await good.publisher.publish(event)
    await wait_applied(pool, "learning", "learning.cache", result.seq)
    async with pool.connection() as conn, conn.cursor() as cur:
        assert (await store.summary_state(cur, good.tenant, good.user)).last_as_of == T0 + 120
        assert (await store.summary_state(cur, bad.tenant, bad.user)).last_as_of == T0


async def test_a_periodic_request_rebuilds_the_due_users_of_its_slot_only(
        learning: None, nc: Any, pool: Any) -> None:
    """The scheduler asks once per slot (so each partition of the learning cache rebuilds its
    own users): a request on `periodic_user(s)` rebuilds the due users whose slot is `s`, and
    the other slot's due user stays due until its own request."""
    from habitus.subjects import slot_of
    from services.stability_detector import store
    from services.stability_detector.periodic import SYSTEM_TENANT, periodic_slot, periodic_user

    first, second = User(nc, pool), User(nc, pool)
    second.tenant = first.tenant
    second.user = next(f"u{n}" for n in range(2, 200)
                       if slot_of(first.tenant, f"u{n}") != slot_of(first.tenant, first.user))
    for u in (first, second):
        await u.candidate(times=3)
        await u.rebuild(T0)
        await u.candidate(times=2, at=T0 + 60)  # due at the next periodic

    async def periodic(slot: int, at: float) -> None:
        user = periodic_user(slot)
        assert periodic_slot(SYSTEM_TENANT, user) == slot
        event = CATALOG.new(RebuildRequested(as_of=at, scope="periodic", reason="periodic"),
                            tenant_id=SYSTEM_TENANT, user_id=user, producer="tests",
                            occurred_at=at)
        result = await first.publisher.publish(event)
        await wait_applied(pool, "learning", "learning.cache", result.seq,
                           slot=slot_of(SYSTEM_TENANT, user))

    async def rebuilt_at(u: User) -> float | None:
        async with pool.connection() as conn, conn.cursor() as cur:
            return (await store.summary_state(cur, u.tenant, u.user)).last_as_of

    await periodic(slot_of(first.tenant, first.user), T0 + 120)
    assert (await rebuilt_at(first), await rebuilt_at(second)) == (T0 + 120, T0)
    await periodic(slot_of(second.tenant, second.user), T0 + 180)
    assert (await rebuilt_at(first), await rebuilt_at(second)) == (T0 + 120, T0 + 180)


async def test_a_periodic_tick_asks_once_per_slot(user: User) -> None:
    """One request per slot, each on a subject stored under that slot, so every partition of
    the learning cache (whatever their number) receives the requests of its own slots."""
    from types import SimpleNamespace

    from habitus.subjects import SLOTS, slot_of
    from services.stability_detector.periodic import SYSTEM_TENANT
    from services.stability_detector.scheduler import RebuildScheduler

    published: list[Event[Any]] = []

    class Recorder:
        async def publish_many(self, events: list[Event[Any]]) -> list[Any]:
            published.extend(events)
            return [None] * len(events)

    ctx = SimpleNamespace(pool=user.pool, publisher=Recorder())
    scheduler = RebuildScheduler(ctx, LearningSettings(scheduler_enabled=False),  # type: ignore[arg-type]
                                 last_periodic=None)
    result = await scheduler.tick(T0 + 30 * DAY)
    assert result.periodic
    periodic = [e for e in published if e.payload.scope == "periodic"]
    assert sorted(slot_of(e.tenant_id, e.user_id) for e in periodic) == list(range(SLOTS))
    assert {e.tenant_id for e in periodic} == {SYSTEM_TENANT}
    assert len({e.event_id for e in periodic}) == SLOTS  # one id per slot and period
    again = await scheduler.tick(T0 + 30 * DAY + 1)  # within the period: none again
    assert not again.periodic


#: in every text the user says below, and nowhere in the schema's vocabulary or ids
MARK = "Zwanenburg"
#: each table's columns that hold what a person said
SEALED_COLUMNS = {"evidence": ("key", "value", "sentence"), "facets": ("key", "value"),
                  "value_stats": ("key", "value"), "commands": ("key", "value", "held_value")}


async def stored_text(pool: Any, tenant: str, user: str) -> dict[str, list[tuple[Any, ...]]]:
    """The user's sealed columns as stored, and each of their rows whole, as text."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with pool.connection() as conn:
        for table, columns in SEALED_COLUMNS.items():
            cur = await conn.execute(
                f"SELECT {', '.join(columns)}, t::text FROM learning.{table} AS t "
                "WHERE tenant_id = %s AND user_id = %s", (tenant, user))
            out[table] = await cur.fetchall()
    return out


def assert_sealed(rows: dict[str, list[tuple[Any, ...]]]) -> None:
    for table, found in rows.items():
        for *values, whole in found:
            assert MARK not in whole, (table, whole)  # nowhere in the row, jsonb included
            for value in values:
                assert value is None or value.startswith("hc1:"), (table, value)


async def test_what_the_user_said_is_sealed_in_every_learning_table_yet_read_back_as_text(
        user: User, pool: Any) -> None:
    from habitus.events.domain import FacetPinned

    veto, said = f"no-preamble-{MARK}", f"Never open with a {MARK} preamble."
    for _ in range(3):
        user.n += 1
        await user._publish(CandidateEmitted.model_validate({
            "class": "veto", "key": veto, "value": f"skip the {MARK} preamble",
            "cue_family": "explicit",
            "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{user.n}"}],
            "initial_confidence": 0.9, "observed_at": T0, "producer": "tests",
            "stance": "standing", "sentence": said}), T0)
    await user.candidate(key=f"signoff-{MARK}", value=f"groetjes, {MARK}", times=2)
    await user.rebuild(T0)
    # a pin naming no value: the value it holds is recorded beside the command (held_value)
    await user._publish(FacetPinned.model_validate({"class": "style",
                                                    "key": f"signoff-{MARK}"}), T0 + 1)
    await user.call("update_facet", **{"class": "tooling", "key": f"editor-{MARK}",
                                       "value": f"{MARK} vim"})

    rows = await stored_text(pool, user.tenant, user.user)
    assert {t: len(r) for t, r in rows.items()} == {
        "evidence": 5, "facets": 3, "value_stats": 2, "commands": 2}
    assert_sealed(rows)
    assert any(held for *_, held, _ in rows["commands"])  # the pin's recorded value, sealed
    assert sum(1 for _, _, sentence, _ in rows["evidence"] if sentence) == 3

    # ... and every answer carries the text
    assert await user.facets() == {
        f"veto/{veto}": (f"skip the {MARK} preamble", "active"),
        f"style/signoff-{MARK}": (f"groetjes, {MARK}", "active"),
        f"tooling/editor-{MARK}": (f"{MARK} vim", "active")}
    explained = await user.call("explain_facet", **{"class": "veto", "key": veto})
    assert explained["value"] == f"skip the {MARK} preamble"
    assert explained["statement"]["sentence"] == said
    assert [v["value"] for v in explained["values"]] == [f"skip the {MARK} preamble"]
    got = await user.call("get_facet", **{"class": "style", "key": f"signoff-{MARK}"})
    assert (got["value"], got["pinned"]) == (f"groetjes, {MARK}", True)
    past = await user.facets(as_of=T0)  # recomputed from the (sealed) evidence and commands
    assert past[f"veto/{veto}"] == (f"skip the {MARK} preamble", "active")
    # the published events carry the text (the event log seals them on its own)
    first = (await user.rebuilt_events())[0].payload
    assert {(a.key, a.value) for a in first.active} == {
        (veto, f"skip the {MARK} preamble"), (f"signoff-{MARK}", f"groetjes, {MARK}")}


async def test_rows_stored_before_sealing_are_read_and_written_again_sealed(
        user: User, pool: Any) -> None:
    """Facets and summaries written unsealed (before sealing, or by a deployment without
    encryption) open as they are; the user's next rebuild writes them again sealed instead of
    beside them, and a key's unsealed evidence still counts."""
    await user.candidate(key=f"tone-{MARK}", value=f"{MARK}-dry", times=3)
    await user.candidate(key="verbosity", value=f"{MARK}-terse", times=2)
    await user.rebuild(T0)
    before = await user.facets()
    t, u = user.tenant, user.user
    async with pool.connection() as conn:  # as a release before sealing would have left them
        for table in ("facets", "value_stats", "evidence"):
            cur = await conn.execute(f"SELECT ctid::text, key, value FROM learning.{table} "
                                     "WHERE tenant_id = %s AND user_id = %s", (t, u))
            for ctid, key, value in await cur.fetchall():
                await conn.execute(
                    f"UPDATE learning.{table} SET key = %s, value = %s WHERE tenant_id = %s "
                    "AND user_id = %s AND ctid = %s::tid",
                    (COLUMNS.open(t, u, key), COLUMNS.open(t, u, value), t, u, ctid))
    assert await user.facets() == before  # read as they are
    explained = await user.call("explain_facet", **{"class": "style", "key": f"tone-{MARK}"})
    assert explained["values"][0]["families"][0]["count"] == 3  # unsealed evidence found

    await user.candidate(key=f"tone-{MARK}", value=f"{MARK}-dry", at=T0 + 60)
    await user.rebuild(T0 + 120)
    rows = await stored_text(pool, t, u)
    assert len(rows["facets"]) == 2 and len(rows["value_stats"]) == 2  # no twins beside them
    assert_sealed({"facets": rows["facets"], "value_stats": rows["value_stats"]})
    assert await user.facets() == before
    got = await user.call("get_facet", **{"class": "style", "key": f"tone-{MARK}"})
    assert got["evidence_count"] == 4
    async with pool.connection() as conn:  # evidence as the log gives it (a later replay)
        cur = await conn.execute("SELECT event_id, key, value FROM learning.evidence "
                                 "WHERE tenant_id = %s AND user_id = %s", (t, u))
        for event_id, key, value in await cur.fetchall():
            await conn.execute(
                "UPDATE learning.evidence SET key = %s, value = %s WHERE tenant_id = %s "
                "AND user_id = %s AND event_id = %s",
                (COLUMNS.seal(t, u, key), COLUMNS.seal(t, u, value), t, u, event_id))


async def test_a_periodic_rebuild_passes_over_a_user_being_erased(
        learning: None, nc: Any, pool: Any) -> None:
    """Between the destruction of a user's keys and the deletion of their rows, nothing of
    theirs opens: a periodic rebuild over many users passes them over and rebuilds the others,
    and a read of theirs answers not_found."""
    from services.stability_detector import store

    kept, gone = User(nc, pool), User(nc, pool)
    gone.tenant = kept.tenant
    gone.user = "u2"
    for u in (kept, gone):
        await u.candidate(key=f"tone-{MARK}", times=3)
        await u.rebuild(T0)
        await u.candidate(key=f"tone-{MARK}", times=2, at=T0 + 60)  # due at the next periodic
    keyring = COLUMNS.keyring
    assert keyring is not None
    keyring.destroy(gone.tenant, gone.user)
    try:
        event = CATALOG.new(RebuildRequested(as_of=T0 + 120, scope="periodic",
                                             reason="periodic"),
                            tenant_id="_system", user_id="_all", producer="tests",
                            occurred_at=T0 + 120)
        result = await kept.publisher.publish(event)
        await wait_applied(pool, "learning", "learning.cache", result.seq)
        async with pool.connection() as conn, conn.cursor() as cur:
            assert (await store.summary_state(cur, kept.tenant, kept.user)).last_as_of \
                == T0 + 120
            assert (await store.summary_state(cur, gone.tenant, gone.user)).last_as_of == T0
            inputs = await store.rebuild_inputs(cur, [(kept.tenant, kept.user),
                                                      (gone.tenant, gone.user)])
        assert inputs[(gone.tenant, gone.user)] is None
        assert inputs[(kept.tenant, kept.user)] is not None
        with pytest.raises(RpcError) as err:
            await gone.call("list_facets")
        assert err.value.code == "not_found"
    finally:  # what the erasure does next (a later replay would not make these rows again)
        async with pool.connection() as conn:
            for table in store.TABLES:
                await conn.execute(f"DELETE FROM {table} WHERE tenant_id = %s "
                                   "AND user_id = %s", (gone.tenant, gone.user))


async def apply_run(pool: Any, events: list[Event[Any]], first_seq: int) -> tuple[int, int]:
    """Apply `events` as one batch of the learning projection, committed: (statements sent,
    CacheRebuilt events emitted)."""
    projection = LearningProjection(SETTINGS)
    ctx = ApplyContext()
    async with pool.connection() as conn:
        cur = CountingCursor(conn)
        await projection.apply_batch(
            cur, [Delivered(e, first_seq + n, "", 1) for n, e in enumerate(events)], ctx)
        await conn.commit()
    return cur.statements, len(ctx.emitted)


def said_by(tenant: str, user: str, n: int, value: str, at: float) -> Event[Any]:
    return CATALOG.new(CandidateEmitted.model_validate({
        "class": "style", "key": "verbosity" if n % 2 else "tone", "value": value,
        "cue_family": "explicit" if n % 3 else "behavioral",
        "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{n}"}],
        "initial_confidence": 0.9, "observed_at": at, "producer": "tests",
    }), tenant_id=tenant, user_id=user, producer="tests", occurred_at=at)


def rebuild_of(tenant: str, user: str, as_of: float) -> Event[Any]:
    return CATALOG.new(RebuildRequested(as_of=as_of, scope="user"), tenant_id=tenant,
                       user_id=user, producer="tests", occurred_at=as_of)


async def test_a_run_of_rebuilds_writes_in_statements_that_do_not_grow_with_its_users(
        learning: None, pool: Any) -> None:
    """A run of rebuild requests reads and writes every user's rows together: 4 users and 24
    users cost the same number of statements once their summaries exist (they cost four or
    five per user when each rebuild wrote its own), and every user's cache is still what the
    whole log gives, the same user twice in one run included."""
    from services.stability_detector import store
    from services.stability_detector.scoring import compute_cache

    seq = 10_000

    async def one_round(tenant: str, users: list[str], round_: int) -> tuple[int, int]:
        nonlocal seq
        at = T0 + 100 * round_
        said = [said_by(tenant, u, n + 4 * round_, ("terse", "plain", "terse")[n], at + n)
                for u in users for n in range(3)]
        await apply_run(pool, said, seq)
        seq += len(said)
        rebuilds = [rebuild_of(tenant, u, at + 10) for u in users]
        rebuilds.insert(len(users) // 2, rebuild_of(tenant, users[0], at + 10))  # again
        counted = await apply_run(pool, rebuilds, seq)
        seq += len(rebuilds)
        return counted

    async def matches_the_log(tenant: str, user: str, as_of: float) -> bool:
        async with pool.connection() as conn, conn.cursor() as cur:
            evidence = await store.load_evidence(cur, tenant, user)
            live = await store.load_facets(cur, tenant, user)
        expected = compute_cache(evidence, [], as_of, SETTINGS, commands_as_of=math.inf)
        return bool(live) and {fk: (r.value, r.state, r.evidence_count, r.evidence_refs)
                               for fk, r in live.items()} == {
            fk: (r.value, r.state, r.evidence_count, r.evidence_refs)
            for fk, r in expected.items()}

    costs = {}
    for size in (4, 24):
        tenant = unique("run")
        users = [f"u{i}" for i in range(size)]
        await one_round(tenant, users, 0)  # summarised from the log: each user's own reads
        statements, announced = await one_round(tenant, users, 1)  # folded forward
        costs[size] = statements
        assert announced == size  # the repeated user's second rebuild changed nothing
        for u in users:
            assert await matches_the_log(tenant, u, T0 + 110), u
    assert costs[4] == costs[24] <= 20, costs
