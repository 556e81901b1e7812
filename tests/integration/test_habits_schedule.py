"""The habits service's background round on real servers: tenants that turned scheduled
Analyze on get one batch per user with unread observations, the others none; observations past
their retention are deleted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.habits_model import ANALYZE, habit, proposals
from tests.support.habits_stack import Client, Stack, habits_stack, observed, until

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    async with habits_stack(servers, schedule_seconds=0.3) as s:
        yield s


async def client(stack: Stack, pool: Any) -> Client:
    tenant = unique("acme")
    return Client(stack.base, await create_key(pool, tenant), tenant)


async def test_scheduled_tenants_get_one_batch_per_user_and_the_others_none(
        stack: Stack, pool: Any) -> None:
    on, off = await client(stack, pool), await client(stack, pool)
    settings = await on.rpc("habits.configure", scheduled_analyze=True)
    assert settings == {"retention_days": 7, "scheduled_analyze": True, "project_names": []}
    assert (await off.rpc("habits.configure"))["scheduled_analyze"] is False
    dana, lee, marker = unique("dana"), unique("lee"), unique("sched")
    # scripted first: a round may come as soon as the turns are captured
    stack.model.script(marker, ANALYZE, lambda obs: proposals(habit(
        "When I ask for the weekly report", "Keep it to three bullet points",
        [o["id"] for o in obs])))
    for c, user in ((off, lee), (on, dana)):
        await c.send(*(c.turn(user, f"[{marker}] Weekly report, three bullets ({user} {n}).")
                       for n in range(3)))
        await observed(pool, c.tenant, user, 3)

    async def suggested() -> list[dict[str, Any]]:
        return await on.habits(dana)
    [made] = await until(suggested)
    assert (made["status"], made["origin"]) == ("candidate", "analyze")
    await asyncio.sleep(1.0)  # three more rounds: nothing more to read for either tenant
    calls = [str(c["messages"]) for c in stack.model.calls(marker, ANALYZE)]
    assert calls and all(dana in c and lee not in c for c in calls)
    assert await off.habits(lee) == []
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT analyzed_seq > 0 FROM habits.watermarks "
                                 "WHERE tenant_id = %s AND user_id = %s", (on.tenant, dana))
        assert await cur.fetchall() == [(True,)]


async def test_observations_past_their_retention_are_deleted(stack: Stack, pool: Any) -> None:
    c, user = await client(stack, pool), unique("dana")
    await c.send(c.turn(user, "Keep it short."), c.turn(user, "Shorter, please."))
    rows = await observed(pool, c.tenant, user, 2)
    async with pool.connection() as conn:
        await conn.execute("UPDATE habits.observations SET expires_at = %s WHERE tenant_id = %s "
                           "AND user_id = %s AND seq = %s",
                           (time.time() - 1, c.tenant, user, rows[0][0]))

    async def left() -> list[Any] | None:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT seq FROM habits.observations WHERE tenant_id = %s "
                                     "AND user_id = %s", (c.tenant, user))
            seqs = [r[0] for r in await cur.fetchall()]
        return seqs if len(seqs) == 1 else None
    assert await until(left) == [rows[1][0]]
