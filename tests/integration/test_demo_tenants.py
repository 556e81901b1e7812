"""A second demo on the same data directory: the scenario's tenants already hold the first
run's turns (same ids, other times), so it picks names that hold nothing yet."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from habitus.demo import fresh_tenants
from habitus.events import CATALOG
from habitus.events.ingest import TurnRecorded
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = [pytest.mark.asyncio]


async def test_taken_tenants_get_the_next_free_suffix(servers: ServerUrls, nc: Any) -> None:
    first, second = unique("demoacme"), unique("demoglobex")
    names = (first, second)
    assert await asyncio.to_thread(fresh_tenants, servers.nats, names) is None

    async def occupy(tenant: str) -> None:
        event = CATALOG.new(TurnRecorded(
            session_id="s1", turn_id="t1", channel="chat", user_message="hi",
            assistant_message="hello", user_at=1.0, assistant_at=2.0),
            tenant_id=tenant, user_id="sam", producer="tests")
        await nc.jetstream().publish(CATALOG.subject(event), event.model_dump_json().encode())

    await occupy(second)  # one of the two taken is enough: the scenario needs both
    assert await asyncio.to_thread(fresh_tenants, servers.nats, names) == {
        first: f"{first}-2", second: f"{second}-2"}
    await occupy(f"{first}-2")
    assert await asyncio.to_thread(fresh_tenants, servers.nats, names) == {
        first: f"{first}-3", second: f"{second}-3"}
