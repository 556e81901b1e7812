"""CheckpointStore and CheckpointWatcher against the session's real Postgres.

The store fences stale claims; a waiter for read-your-writes is woken by the checkpoint's NOTIFY
(not by its fallback re-read), survives its listener connection being killed, and tells a
dead-lettered sequence from an applied one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from habitus.projection.checkpoints import (
    AppliedKey,
    CheckpointStore,
    checkpoint_ddl,
    tracking_ddl,
)
from habitus.projection.faults import Fenced
from habitus.projection.wait import DeadLettered, NotAppliedYet, wait_applied
from habitus.projection.watch import CheckpointWatcher
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio

PROJECTION = "tests.checkpoints"


@pytest_asyncio.fixture
async def store(pool: Any) -> AsyncIterator[CheckpointStore]:
    schema = unique("cps")
    async with pool.connection() as conn:
        for stmt in [*checkpoint_ddl(schema), *tracking_ddl(schema)]:
            await conn.execute(stmt)
        await conn.commit()
    yield CheckpointStore(schema)
    async with pool.connection() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.commit()


@pytest_asyncio.fixture
async def watcher(pool: Any) -> AsyncIterator[CheckpointWatcher]:
    # A fallback re-read far longer than any wait below: only a notification (or the listener's
    # reconnect) can wake a waiter in time.
    w = CheckpointWatcher(str(pool.conninfo), fallback_interval=30.0)
    assert await w.wait_listening(10.0)
    yield w
    await w.close()


async def claim(pool: Any, store: CheckpointStore, projection: str = PROJECTION) -> int:
    async with pool.connection() as conn, conn.transaction():
        return (await store.claim(conn, projection)).epoch


async def commit(pool: Any, store: CheckpointStore, epoch: int, seq: int,
                 projection: str = PROJECTION) -> None:
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await store.commit(cur, projection, epoch, seq)


async def test_a_claim_fences_the_older_epoch(pool: Any, store: CheckpointStore) -> None:
    old = await claim(pool, store)
    await commit(pool, store, old, 4)
    new = await claim(pool, store)
    assert new == old + 1
    async with pool.connection() as conn:
        assert await store.epoch(conn, PROJECTION) == new
        assert await store.last_seq(conn, PROJECTION) == 4  # a claim never moves it
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        with pytest.raises(Fenced):
            await store.lock_epoch(cur, PROJECTION, old)
        await store.lock_epoch(cur, PROJECTION, new)


async def test_a_commit_by_a_stale_epoch_raises_fenced_and_changes_nothing(
        pool: Any, store: CheckpointStore) -> None:
    old = await claim(pool, store)
    new = await claim(pool, store)
    with pytest.raises(Fenced):
        await commit(pool, store, old, 9)
    async with pool.connection() as conn:
        assert await store.last_seq(conn, PROJECTION) == 0
    await commit(pool, store, new, 9)
    async with pool.connection() as conn:
        assert await store.last_seq(conn, PROJECTION) == 9


async def test_a_reset_zeroes_the_checkpoint_and_fences_the_runner(
        pool: Any, store: CheckpointStore) -> None:
    epoch = await claim(pool, store)
    await commit(pool, store, epoch, 7)
    async with pool.connection() as conn, conn.transaction():
        await store.reset(conn, PROJECTION)
    async with pool.connection() as conn:
        assert await store.last_seq(conn, PROJECTION) == 0
    with pytest.raises(Fenced):
        await commit(pool, store, epoch, 8)


async def test_a_waiter_is_woken_by_the_commit_notification(
        pool: Any, store: CheckpointStore, watcher: CheckpointWatcher) -> None:
    epoch = await claim(pool, store)
    started = time.monotonic()
    waiter = asyncio.create_task(
        wait_applied(pool, store.schema, PROJECTION, 5, timeout=20.0, watcher=watcher))
    await asyncio.sleep(0.2)
    assert not waiter.done()  # it read the checkpoint (0) and is waiting
    await commit(pool, store, epoch, 3)  # not far enough: it keeps waiting
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await commit(pool, store, epoch, 5)
    await asyncio.wait_for(waiter, 10.0)
    # Well before the 30 s fallback re-read: the NOTIFY woke it (a bound, not a benchmark).
    assert time.monotonic() - started < 5.0


async def test_a_waiter_returns_after_the_listener_connection_is_killed(
        pool: Any, store: CheckpointStore, watcher: CheckpointWatcher) -> None:
    epoch = await claim(pool, store)
    pid = watcher.listener_pid
    assert pid is not None
    waiter = asyncio.create_task(
        wait_applied(pool, store.schema, PROJECTION, 2, timeout=20.0, watcher=watcher))
    await asyncio.sleep(0.1)
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await conn.commit()
    # Committed while the listener is down: its notification reaches no one.
    await commit(pool, store, epoch, 2)
    await asyncio.wait_for(waiter, 10.0)  # woken by the reconnect (the fallback is 30 s)
    assert await watcher.wait_listening(10.0)
    assert watcher.listener_pid not in (None, pid)


async def test_a_waiter_polls_when_no_listener_can_connect(
        pool: Any, store: CheckpointStore) -> None:
    epoch = await claim(pool, store)
    unreachable = psycopg.conninfo.make_conninfo(str(pool.conninfo), port=1, connect_timeout=1)
    blind = CheckpointWatcher(unreachable, fallback_interval=0.2)
    try:
        waiter = asyncio.create_task(
            wait_applied(pool, store.schema, PROJECTION, 1, timeout=20.0, watcher=blind))
        await asyncio.sleep(0.1)
        await commit(pool, store, epoch, 1)
        await asyncio.wait_for(waiter, 10.0)
        assert blind.listener_pid is None
    finally:
        await blind.close()


async def test_wait_applied_tells_dead_letters_absent_rows_and_timeouts(
        pool: Any, store: CheckpointStore, watcher: CheckpointWatcher) -> None:
    # No checkpoint row: unless_absent returns at once, otherwise it waits until the timeout.
    await wait_applied(pool, store.schema, PROJECTION, 1, timeout=5.0, unless_absent=True,
                       watcher=watcher)
    with pytest.raises(NotAppliedYet):
        await wait_applied(pool, store.schema, PROJECTION, 1, timeout=0.2, watcher=watcher)

    epoch = await claim(pool, store)
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await store.record_dead_letter(cur, PROJECTION, 3, "e3", "apply_failed", "boom")
        await store.commit(cur, PROJECTION, epoch, 3)
    with pytest.raises(DeadLettered) as raised:
        await wait_applied(pool, store.schema, PROJECTION, 3, timeout=5.0, watcher=watcher)
    assert (raised.value.record.reason, raised.value.record.event_id) == ("apply_failed", "e3")
    await wait_applied(pool, store.schema, PROJECTION, 2, timeout=5.0, watcher=watcher)
    async with pool.connection() as conn:
        assert await store.dead_letter_at(conn, PROJECTION, 2) is None


async def test_forget_user_removes_only_that_users_applied_rows(
        pool: Any, store: CheckpointStore) -> None:
    keys = [AppliedKey("t1", "gone", "e1", 1), AppliedKey("t1", "kept", "e2", 2),
            AppliedKey("t2", "gone", "e3", 3)]
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        assert await store.claim_unapplied(cur, "tests.a", keys) == {1, 2, 3}
        assert await store.claim_unapplied(cur, "tests.b", keys[:1]) == {1}
        assert await store.claim_unapplied(cur, "tests.a", keys[:1]) == set()  # a copy
        assert await store.forget_user(cur, "t1", "gone") == 2  # both projections
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT projection, tenant_id, user_id FROM {store.applied} ORDER BY 1, 2, 3")
        assert await cur.fetchall() == [("tests.a", "t1", "kept"), ("tests.a", "t2", "gone")]
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        # Forgotten ids apply again; the others are still known.
        assert await store.claim_unapplied(cur, "tests.a", keys) == {1}
