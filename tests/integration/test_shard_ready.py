"""Every table holding a tenant's data has the tenant in its primary key and in every unique
index (habitus.db.sharding): checked over the migrated schemas of every service, and shown to
catch what breaks it in a real catalog (the rule itself: tests/unit/test_shard_rule.py)."""

from __future__ import annotations

import psycopg
import pytest

from habitus.db.sharding import table_shapes, violations
from habitus.db.urls import conninfo
from habitus.projection.checkpoints import CheckpointStore
from habitus.service.migrations import migrate, sources

pytestmark = pytest.mark.asyncio


async def test_every_service_table_is_ready_to_shard_by_tenant(fresh_database: str) -> None:
    migrate(fresh_database)
    schemas = sorted(sources())
    async with await psycopg.AsyncConnection.connect(conninfo(fresh_database)) as conn:
        shapes = await table_shapes(conn, schemas)
    assert {s.schema for s in shapes} == set(schemas)  # every service's tables were read
    assert len(shapes) > 50
    assert violations(shapes) == []
    dead = [s for s in shapes if s.name == "dead_letters"]
    assert dead and all(
        next(i for i in s.unique if i.primary).columns[0] == "tenant_id" for s in dead)


async def test_the_catalog_check_catches_a_table_that_breaks_the_rule(fresh_database: str
                                                                      ) -> None:
    migrate(fresh_database, only=["habits"])
    async with await psycopg.AsyncConnection.connect(conninfo(fresh_database),
                                                     autocommit=True) as conn:
        await conn.execute("CREATE TABLE habits.notes (tenant_id text NOT NULL, "
                           "note_id text PRIMARY KEY, body text)")
        await conn.execute("CREATE UNIQUE INDEX notes_body ON habits.notes (lower(body))")
        await conn.execute("CREATE TABLE habits.lookups (word text PRIMARY KEY)")
        found = violations(await table_shapes(conn, ["habits"]))
    assert found == [
        "habits.lookups: no tenant_id column, and not declared in "
        "habitus.db.sharding.LOCAL_TABLES",
        "habits.notes: primary key notes_pkey (note_id) lacks tenant_id",
        "habits.notes: unique index notes_body ((expression)) lacks tenant_id",
    ]


async def test_a_dead_letter_without_a_readable_tenant_is_kept_under_the_empty_one(
        fresh_database: str) -> None:
    migrate(fresh_database, only=["producers"])
    store = CheckpointStore("producers")
    async with await psycopg.AsyncConnection.connect(conninfo(fresh_database),
                                                     autocommit=True) as conn:
        for detail in ("not json", "still not json"):  # the same seq twice: one record
            await store.record_dead_letter(conn, "producers.candidates", 7, None,
                                           "invalid_event", detail)
        await store.record_dead_letter(conn, "producers.candidates", 8, "e8", "apply_failed",
                                       "boom", "acme", "u1")
        letter = await store.dead_letter_at(conn, "producers.candidates", 7)
        cur = await conn.execute("SELECT tenant_id, seq FROM producers.dead_letters "
                                 "ORDER BY seq")
        rows = await cur.fetchall()
    assert letter is not None and letter.detail == "still not json"
    assert rows == [("", 7), ("acme", 8)]
