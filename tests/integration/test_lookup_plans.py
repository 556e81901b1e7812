"""Batch lookups by key read the keys' rows, not the table: their cost follows the batch, not
the history stored.

Each store reads what a batch already holds in one statement, its keys passed as arrays and
joined to the table. How the keys are passed decides the plan: the planner sized a JSON
parameter's `jsonb_array_elements` at 100 rows whatever it held and so hashed the keys and
scanned every stored trace for each batch (3 ms at 2,000 traces, growing). These tests store a
few thousand rows, run the lookup more times than Postgres plans custom before it settles on
a generic plan, and read the table's own scan counters: an index scan per lookup and no
sequential scan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from psycopg import AsyncCursor

from habitus.db.migrate import alembic_config
from habitus.service.migrations import migrate
from services.producers import store as producers_store
from services.stability_detector import store as learning_store
from services.stability_detector.scoring import FacetRow
from services.trace_router import store as traces_store
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio

ROWS = 3_000
#: Postgres plans a prepared statement for its parameters 5 times, then may keep a generic plan
RUNS = 8
MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "trace_router" / "migrations"


async def scans(cur: AsyncCursor[Any], table: str) -> tuple[int, int]:
    """(sequential, index) scans of `table` so far, this backend's included."""
    await cur.execute("SELECT pg_stat_force_next_flush()")
    await cur.connection.commit()
    schema, name = table.split(".")
    await cur.execute("SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) "
                      "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                      (schema, name))
    row = await cur.fetchone()
    assert row is not None, table
    return int(row[0]), int(row[1])


async def lookups_use_the_index(pool: Any, table: str,
                                lookup: Callable[[AsyncCursor[Any]], Awaitable[int]]) -> None:
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(f"ANALYZE {table}")
        seq_before, idx_before = await scans(cur, table)
        for _ in range(RUNS):
            assert await lookup(cur) == 2  # two of the three keys are stored
            await conn.commit()
        seq_after, idx_after = await scans(cur, table)
    assert seq_after == seq_before, f"{table}: a lookup scanned the whole table"
    assert idx_after >= idx_before + RUNS


async def test_a_batch_of_trace_keys_is_looked_up_not_scanned_for(
        servers: ServerUrls, pool: Any) -> None:
    command.upgrade(alembic_config(servers.database, "traces", MIGRATIONS), "head")
    tenant = unique("tn")
    rows = [traces_store.TraceRow(
        tenant_id=tenant, user_id=f"u{i % 40}", trace_id=f"trace-{i}", seq=i,
        query=f"Summarise the incident report number {i} for the on-call channel",
        agent="helper", model="qwen3:8b", engine="ollama", result="Done.", outcome=None,
        feedback=None, started_at=1_790_000_000.0 + i, ended_at=1_790_000_001.0 + i,
        total_tokens=120, prompt_tokens=None, completion_tokens=None,
        total_latency_seconds=1.0, cost_usd=None, query_class="summarise", tool_calls=0,
        step_count=0, reward=None) for i in range(ROWS)]
    async with pool.connection() as conn, conn.cursor() as cur:
        await traces_store.insert_traces(cur, rows, [])
    wanted = [(tenant, "u7", "trace-7"), (tenant, "u9", "trace-9"), (tenant, "u1", "absent")]

    async def lookup(cur: AsyncCursor[Any]) -> int:
        return len(await traces_store.existing_traces(cur, wanted))

    await lookups_use_the_index(pool, traces_store.TRACES, lookup)


async def test_a_batch_of_sessions_is_looked_up_not_scanned_for(
        servers: ServerUrls, pool: Any) -> None:
    migrate(servers.database)
    tenant = unique("tn")
    async with pool.connection() as conn, conn.cursor() as cur:
        await producers_store.save_sessions(cur, {
            (tenant, f"u{i % 50}", f"s{i}"): ({"turns": [], "fired": []}, i)
            for i in range(ROWS)})
    wanted = [(tenant, "u3", "s3"), (tenant, "u4", "s4"), (tenant, "u4", "absent")]

    async def lookup(cur: AsyncCursor[Any]) -> int:
        return len(await producers_store.load_sessions(cur, wanted))

    await lookups_use_the_index(pool, producers_store.SESSIONS, lookup)


async def test_a_batch_of_rebuilds_looks_its_users_facets_up_not_scanned_for(
        servers: ServerUrls, pool: Any) -> None:
    migrate(servers.database)
    tenant = unique("tn")
    keys = [("style", "verbosity"), ("style", "tone"), ("tooling", "language"),
            ("channel", "preferred"), ("identity", "timezone")]
    async with pool.connection() as conn, conn.cursor() as cur:
        for u in range(ROWS // len(keys)):
            rows = {fk: FacetRow(facet_class=fk[0], key=fk[1], value=f"v{u}", state="active",
                                 stability=2.0, user_state="none", evidence_count=3,
                                 first_seen_at=1_790_000_000.0, last_evidence_at=1_790_000_000.0)
                    for fk in keys}
            await learning_store.save_facets(
                cur, tenant, f"u{u}", 1_790_000_000.0, {}, rows, list(rows.values()), None,
                learning_store.SummaryState(None, 0, (), None))
    wanted = [(tenant, "u3"), (tenant, "u4"), (tenant, "absent")]

    async def lookup(cur: AsyncCursor[Any]) -> int:
        return sum(1 for rows in (await learning_store.facets_of(cur, wanted)).values() if rows)

    try:
        await lookups_use_the_index(pool, learning_store.FACETS, lookup)
    finally:
        # Rows no event made: a replay of the learning cache in a later test of this server
        # (test_stability_detector's) would not make them again, and would be right not to.
        async with pool.connection() as conn:
            for table in (learning_store.FACETS, learning_store.USERS):
                await conn.execute(f"DELETE FROM {table} WHERE tenant_id = %s", (tenant,))
