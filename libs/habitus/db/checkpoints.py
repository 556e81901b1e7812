"""Projection checkpoints and the tracking that goes with them, in the view's own transaction.

A row per projection in the owning service's schema. `emitted_seq` remembers how far the
projection's consequences (events it emitted) were published, so a replay rebuilds the view
without publishing them a second time. `epoch` fences writers: whoever claims the
projection bumps it, and a batch commits only if the epoch it started with is still current, so
a stale replica (or one that lost its lock) can never commit behind a newer one.

Two tracking tables sit beside the checkpoint, written in the same transaction:

* `applied_events` remembers every event id a projection applied. JetStream drops a re-published
  id only inside its duplicate window; past it the stream stores a second copy, and without this
  record the projection would apply it again (a stale `CacheRebuilt` would roll a profile back).
* `dead_letters` remembers which sequences went to the DLQ and why, so a command waiting for its
  event to be applied can tell "applied" from "given up on" and answer with the reason.

All the SQL for these tables lives here, so no other module spells them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, AsyncCursor

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _schema(schema: str) -> str:
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return schema


def checkpoint_table(schema: str) -> str:
    return f"{_schema(schema)}.projection_checkpoints"


def applied_table(schema: str) -> str:
    return f"{_schema(schema)}.applied_events"


def dead_letter_table(schema: str) -> str:
    return f"{_schema(schema)}.dead_letters"


def checkpoint_ddl(schema: str) -> list[str]:
    table = checkpoint_table(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {table} (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""",
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS emitted_seq bigint NOT NULL DEFAULT 0",
    ]


def tracking_ddl(schema: str) -> list[str]:
    """The applied-ids and dead-letter tables (idempotent statements)."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {applied_table(schema)} (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {dead_letter_table(schema)} (
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (projection, seq)
        )""",
    ]


@dataclass(frozen=True, slots=True)
class AppliedKey:
    tenant_id: str
    user_id: str
    event_id: str
    seq: int


async def claim_unapplied(cur: AsyncCursor[Any], schema: str, projection: str,
                          keys: Sequence[AppliedKey]) -> set[int]:
    """Record `keys` as applied by `projection`; return the sequences applied for the first
    time (an id already recorded, at an earlier sequence, is a re-published copy).

    One statement for the whole batch. Callers pass at most one key per event id."""
    if not keys:
        return set()
    await cur.execute(
        f"""INSERT INTO {applied_table(schema)} (projection, tenant_id, user_id, event_id, seq)
            SELECT %s, t, u, e, s
            FROM unnest(%s::text[], %s::text[], %s::text[], %s::int8[]) AS k(t, u, e, s)
            ON CONFLICT DO NOTHING RETURNING seq""",
        (projection, [k.tenant_id for k in keys], [k.user_id for k in keys],
         [k.event_id for k in keys], [k.seq for k in keys]),
    )
    return {int(row[0]) for row in await cur.fetchall()}


async def record_dead_letter(cur: AsyncCursor[Any], schema: str, projection: str, seq: int,
                             event_id: str | None, reason: str, detail: str) -> None:
    await cur.execute(
        f"""INSERT INTO {dead_letter_table(schema)} (projection, seq, event_id, reason, detail)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (projection, seq) DO UPDATE SET event_id = EXCLUDED.event_id,
              reason = EXCLUDED.reason, detail = EXCLUDED.detail, dead_at = now()""",
        (projection, seq, event_id, reason, detail[:4000]),
    )


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    seq: int
    event_id: str | None
    reason: str
    detail: str


async def dead_letter_at(conn: AsyncConnection[Any], schema: str, projection: str, seq: int
                         ) -> DeadLetterRecord | None:
    cur = await conn.execute(
        f"SELECT seq, event_id, reason, detail FROM {dead_letter_table(schema)} "
        "WHERE projection = %s AND seq = %s", (projection, seq))
    row = await cur.fetchone()
    return None if row is None else DeadLetterRecord(int(row[0]), row[1], row[2], row[3])


async def forget_tracking(cur: AsyncCursor[Any], schema: str, projection: str) -> None:
    """A replay starts from nothing: the ids it applied and its dead letters go with the view."""
    for table in (applied_table(schema), dead_letter_table(schema)):
        await cur.execute(f"DELETE FROM {table} WHERE projection = %s", (projection,))
