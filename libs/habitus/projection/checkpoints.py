"""Projection checkpoints and the tracking that goes with them, in the view's own transaction.

A row per projection in the owning service's schema (`<schema>.projection_checkpoints`).
`last_seq` is the stream sequence the view includes; `emitted_seq` remembers how far the
projection's consequences (events it emitted) were published, so a replay rebuilds the view
without publishing them a second time. `epoch` fences writers: whoever claims the projection
bumps it, and a batch commits only if the epoch it started with is still current, so a stale
replica (or one that lost its lock) can never commit behind a newer one.

Two tracking tables sit beside the checkpoint, written in the same transaction:

* `applied_events` remembers every event id a projection applied. JetStream drops a re-published
  id only inside its duplicate window; past it the stream stores a second copy, and without this
  record the projection would apply it again (a stale `CacheRebuilt` would roll a profile back).
* `dead_letters` remembers which sequences went to the DLQ and why, so a command waiting for its
  event to be applied can tell "applied" from "given up on" and answer with the reason.

Every statement on these three tables is a method of `CheckpointStore`, so no other module
spells them. A moved checkpoint is announced with `NOTIFY habitus_checkpoint` in the same
transaction (Postgres delivers it at commit, never for a rollback): waiters for read-your-writes
(`habitus.projection.watch`) wake on it instead of polling.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, AsyncCursor

from habitus.projection.faults import Fenced

#: the channel a checkpoint move is announced on; payload "<schema>|<projection>|<last_seq>"
CHANNEL = "habitus_checkpoint"

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: a connection or a cursor: statements run in whatever transaction it is in
Executor = AsyncConnection[Any] | AsyncCursor[Any]


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
    """The checkpoint table (idempotent statements)."""
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
        # whose event it was (from the subject when the event itself could not be read; ''
        # when not even that names a tenant), so erasing a user erases their dead letters'
        # records too; the tenant leads the key, as in every table holding a tenant's data
        f"""CREATE TABLE IF NOT EXISTS {dead_letter_table(schema)} (
            tenant_id text NOT NULL DEFAULT '',
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            user_id text,
            PRIMARY KEY (tenant_id, projection, seq)
        )""",
        f"""CREATE INDEX IF NOT EXISTS dead_letters_by_seq
            ON {dead_letter_table(schema)} (projection, seq)""",
    ]


def notification(schema: str, projection: str, seq: int) -> str:
    return f"{schema}|{projection}|{seq}"


def parse_notification(payload: str) -> tuple[str, str, int] | None:
    """(schema, projection, last_seq) of a CHANNEL payload; None if it is not one."""
    schema, sep, rest = payload.partition("|")
    projection, sep2, seq = rest.rpartition("|")
    if not sep or not sep2 or not seq.isdigit():
        return None
    return schema, projection, int(seq)


@dataclass(frozen=True, slots=True)
class AppliedKey:
    tenant_id: str
    user_id: str
    event_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    seq: int
    event_id: str | None
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What a claim returns: the new epoch and where the projection stands."""

    epoch: int
    last_seq: int
    emitted_seq: int


async def _run(ex: Executor, sql: str, params: Sequence[Any] = ()) -> AsyncCursor[Any]:
    if isinstance(ex, AsyncConnection):
        return await ex.execute(sql, params)
    await ex.execute(sql, params)
    return ex


class CheckpointStore:
    """Every statement on a schema's checkpoint, applied-ids and dead-letter tables.

    Methods run on the connection or cursor they are given, inside its transaction; the caller
    commits. `commit` and `reset` also announce the new checkpoint on CHANNEL."""

    def __init__(self, schema: str):
        self.schema = _schema(schema)
        self.checkpoints = checkpoint_table(schema)
        self.applied = applied_table(schema)
        self.dead_letters = dead_letter_table(schema)

    # ------------------------------------------------------------------ the checkpoint row

    async def claim(self, ex: Executor, projection: str) -> Claim:
        """Create the row if absent and bump its epoch (fencing every older claim)."""
        cur = await _run(
            ex,
            f"INSERT INTO {self.checkpoints} AS c (projection, epoch) VALUES (%s, 1) "
            "ON CONFLICT (projection) DO UPDATE SET epoch = c.epoch + 1, updated_at = now() "
            "RETURNING epoch, last_seq, emitted_seq",
            (projection,),
        )
        row = await cur.fetchone()
        assert row is not None
        return Claim(int(row[0]), int(row[1]), int(row[2]))

    async def commit(self, cur: AsyncCursor[Any], projection: str, epoch: int, seq: int) -> None:
        """Move the checkpoint (and emitted_seq) to `seq` if `epoch` is still current, and
        announce it at commit; raise Fenced otherwise."""
        await cur.execute(
            f"UPDATE {self.checkpoints} SET last_seq = %s, "
            "emitted_seq = GREATEST(emitted_seq, %s), updated_at = now() "
            "WHERE projection = %s AND epoch = %s RETURNING pg_notify(%s, %s)",
            (seq, seq, projection, epoch, CHANNEL, notification(self.schema, projection, seq)),
        )
        if cur.rowcount != 1:
            raise Fenced(f"epoch {epoch} is no longer current")

    async def lock_epoch(self, cur: AsyncCursor[Any], projection: str, epoch: int) -> None:
        """Hold the checkpoint row until commit; raise Fenced unless `epoch` is current."""
        await cur.execute(
            f"SELECT 1 FROM {self.checkpoints} WHERE projection = %s AND epoch = %s FOR UPDATE",
            (projection, epoch),
        )
        if await cur.fetchone() is None:
            raise Fenced(f"epoch {epoch} is no longer current")

    async def epoch(self, ex: Executor, projection: str) -> int | None:
        cur = await _run(ex, f"SELECT epoch FROM {self.checkpoints} WHERE projection = %s",
                         (projection,))
        row = await cur.fetchone()
        return None if row is None else int(row[0])

    def last_seq_query(self, projection_param: str = "%s") -> str:
        """`last_seq`'s query, the projection as `projection_param`, for a reader that reads
        the checkpoint in the same statement as the data it stamps (as a scalar subquery:
        NULL when there is no row)."""
        return f"SELECT last_seq FROM {self.checkpoints} WHERE projection = {projection_param}"

    async def last_seq(self, ex: Executor, projection: str) -> int | None:
        """The projection's checkpoint; None when it has no row (never claimed)."""
        cur = await _run(ex, self.last_seq_query(), (projection,))
        row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def reset(self, ex: Executor, projection: str, tables: Sequence[str] = (), *,
                    republish: bool = False) -> None:
        """Start the projection again from nothing: empty `tables`, forget what it applied and
        dead-lettered, set its checkpoint to 0 and bump the epoch (fencing a live runner).
        `emitted_seq` stays, so a rebuild does not publish consequences a second time, unless
        `republish` (their ids derive from their causes: inside the stream's duplicate window
        the copies are dropped, which is how a test proves a replay emits the same ids)."""
        if tables:
            await _run(ex, f"TRUNCATE {', '.join(tables)}")
        await self.forget_tracking(ex, projection)
        await _run(ex, f"INSERT INTO {self.checkpoints} (projection) VALUES (%s) "
                       "ON CONFLICT DO NOTHING", (projection,))
        await _run(
            ex,
            f"UPDATE {self.checkpoints} SET last_seq = 0, epoch = epoch + 1, updated_at = now(), "
            "emitted_seq = CASE WHEN %s THEN 0 ELSE emitted_seq END "
            "WHERE projection = %s RETURNING pg_notify(%s, %s)",
            (republish, projection, CHANNEL, notification(self.schema, projection, 0)),
        )

    # ------------------------------------------------------------------ tracking

    async def claim_unapplied(self, cur: AsyncCursor[Any], projection: str,
                              keys: Sequence[AppliedKey]) -> set[int]:
        """Record `keys` as applied by `projection`; return the sequences applied for the first
        time (an id already recorded, at an earlier sequence, is a re-published copy).

        One statement for the whole batch. Callers pass at most one key per event id."""
        if not keys:
            return set()
        await cur.execute(
            f"""INSERT INTO {self.applied} (projection, tenant_id, user_id, event_id, seq)
                SELECT %s, t, u, e, s
                FROM unnest(%s::text[], %s::text[], %s::text[], %s::int8[]) AS k(t, u, e, s)
                ON CONFLICT DO NOTHING RETURNING seq""",
            (projection, [k.tenant_id for k in keys], [k.user_id for k in keys],
             [k.event_id for k in keys], [k.seq for k in keys]),
        )
        return {int(row[0]) for row in await cur.fetchall()}

    async def record_dead_letter(self, ex: Executor, projection: str, seq: int,
                                 event_id: str | None, reason: str, detail: str,
                                 tenant_id: str | None = None, user_id: str | None = None
                                 ) -> None:
        await _run(
            ex,
            f"""INSERT INTO {self.dead_letters}
                  (projection, seq, event_id, reason, detail, tenant_id, user_id)
                VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (tenant_id, projection, seq) DO UPDATE SET
                  event_id = EXCLUDED.event_id, reason = EXCLUDED.reason,
                  detail = EXCLUDED.detail, dead_at = now(), user_id = EXCLUDED.user_id""",
            (projection, seq, event_id, reason, detail[:4000], tenant_id or "", user_id),
        )

    async def dead_letter_at(self, ex: Executor, projection: str, seq: int
                             ) -> DeadLetterRecord | None:
        cur = await _run(
            ex,
            f"SELECT seq, event_id, reason, detail FROM {self.dead_letters} "
            "WHERE projection = %s AND seq = %s", (projection, seq))
        row = await cur.fetchone()
        return None if row is None else DeadLetterRecord(int(row[0]), row[1], row[2], row[3])

    async def forget_tracking(self, ex: Executor, projection: str) -> None:
        """A replay starts from nothing: the ids it applied and its dead letters go with the
        view."""
        for table in (self.applied, self.dead_letters):
            await _run(ex, f"DELETE FROM {table} WHERE projection = %s", (projection,))

    async def forget_user(self, ex: Executor, tenant_id: str, user_id: str) -> int:
        """Erase a user: delete their applied ids and the records of their dead letters, for
        every projection of the schema. Returns how many rows went."""
        gone = 0
        for table in (self.applied, self.dead_letters):
            cur = await _run(
                ex, f"DELETE FROM {table} WHERE tenant_id = %s AND user_id = %s",
                (tenant_id, user_id))
            gone += cur.rowcount
        return gone
