"""Projection checkpoints and the tracking that goes with them, in the view's own transaction.

A row per partition of each projection in the owning service's schema
(`<schema>.projection_checkpoints`, keyed by projection, partition count and partition index;
an unpartitioned projection has the one row 0 of 1). `last_seq` is the stream sequence the
partition's view includes (every event on its filter up to it is applied); `emitted_seq`
remembers how far the consequences (events it emitted) were published, so a replay rebuilds the
view without publishing them a second time. `epoch` fences writers: whoever claims a partition
bumps it, and a batch commits only if the epoch it started with is still current, so a stale
replica (or one that lost its lock) can never commit behind a newer one. `owner` names the
replica that claimed it last (what `habitus partitions` shows).

The rows are the projection's *layout*: the first claim creates it (every partition at 0), and
only `repartition` changes it, explicitly: the old partitions are marked `draining` with a
cutover sequence (the stream's end at that moment) and the new ones are created `pending` at
it. A draining partition applies up to the cutover and then goes (`finish_drain`); when the last
one has gone the pending ones turn `active` and start after the cutover. So a user's events up
to the cutover are applied by the old layout and the rest by the new one, in order, each once.
Whatever the layout, "has the projection applied sequence `s` of this slot's events" is the
same test: every row whose partition reads the slot is at `s` or beyond (a pending row starts
at the cutover, a draining row goes once it reaches it), and the lowest of them is how far the
slot's view is (`last_seq` with a slot).

Two tracking tables sit beside the checkpoint, written in the same transaction:

* `applied_events` remembers every event id a projection applied. JetStream drops a re-published
  id only inside its duplicate window; past it the stream stores a second copy, and without this
  record the projection would apply it again (a stale `CacheRebuilt` would roll a profile back).
* `dead_letters` remembers which sequences went to the DLQ and why, so a command waiting for its
  event to be applied can tell "applied" from "given up on" and answer with the reason.

A fourth, `projection_members`, holds the service's live replicas and their leases (who shares
the partitions; `habitus.projection.assignment`).

Every statement on these four tables is a method of `CheckpointStore`, so no other module
spells them. A moved checkpoint is announced with `NOTIFY habitus_checkpoint` in the same
transaction (Postgres delivers it at commit, never for a rollback): waiters for read-your-writes
(`habitus.projection.watch`) wake on it instead of polling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, AsyncCursor

from habitus.crypto.columns import COLUMNS
from habitus.crypto.keyring import Shredded
from habitus.projection.faults import Fenced
from habitus.projection.partitions import WHOLE, Partition, layout
from habitus.projection.tables import (
    applied_table,
    checkpoint_ddl,
    checkpoint_table,
    dead_letter_table,
    members_table,
    membership_ddl,
    partitions_migration,
    schema_name,
    tracking_ddl,
)

__all__ = [
    "CHANNEL", "AppliedKey", "CheckpointStore", "Claim", "DeadLetterRecord", "LayoutBusy",
    "PartitionGone", "PartitionRow", "applied_table", "checkpoint_ddl", "checkpoint_table",
    "dead_letter_table", "members_table", "membership_ddl", "notification",
    "parse_notification", "partitions_migration", "tracking_ddl",
]

#: the channel a checkpoint move is announced on; payload "<schema>|<projection>|<last_seq>"
CHANNEL = "habitus_checkpoint"

#: a connection or a cursor: statements run in whatever transaction it is in
Executor = AsyncConnection[Any] | AsyncCursor[Any]


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
    """What a claim returns: the new epoch and where the partition stands."""

    epoch: int
    last_seq: int
    emitted_seq: int
    #: "active"; "draining" (apply up to `cutover_seq`, then go); "pending" (wait)
    state: str = "active"
    cutover_seq: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One row of a projection's layout."""

    partition: Partition
    last_seq: int
    epoch: int
    emitted_seq: int
    state: str
    cutover_seq: int | None
    owner: str | None


class PartitionGone(LookupError):
    """The partition is not in the projection's layout (it was repartitioned meanwhile)."""


class LayoutBusy(RuntimeError):
    """A repartition was asked for while another is still draining."""


_ROW = "parts, part, last_seq, epoch, emitted_seq, state, cutover_seq, owner"


def _row(r: Sequence[Any]) -> PartitionRow:
    return PartitionRow(Partition(int(r[1]), int(r[0])), int(r[2]), int(r[3]), int(r[4]),
                        str(r[5]), None if r[6] is None else int(r[6]), r[7])


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
        self.schema = schema_name(schema)
        self.checkpoints = checkpoint_table(schema)
        self.members = members_table(schema)
        self.applied = applied_table(schema)
        self.dead_letters = dead_letter_table(schema)

    # ------------------------------------------------------------------ the checkpoint row

    async def layout(self, ex: Executor, projection: str) -> list[PartitionRow]:
        """The projection's partitions as stored (empty: never claimed), in order."""
        cur = await _run(ex, f"SELECT {_ROW} FROM {self.checkpoints} WHERE projection = %s "
                             "ORDER BY parts, part", (projection,))
        return [_row(r) for r in await cur.fetchall()]

    async def layouts(self, ex: Executor) -> dict[str, list[PartitionRow]]:
        """Every projection's layout in this schema."""
        cur = await _run(ex, f"SELECT projection, {_ROW} FROM {self.checkpoints} "
                             "ORDER BY projection, parts, part")
        out: dict[str, list[PartitionRow]] = {}
        for r in await cur.fetchall():
            out.setdefault(str(r[0]), []).append(_row(r[1:]))
        return out

    async def _lock_layout(self, ex: Executor, projection: str) -> None:
        """Serialise changes of one projection's layout (until the transaction ends)."""
        await _run(ex, "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                   (f"habitus.layout:{self.schema}.{projection}",))

    async def ensure_layout(self, ex: Executor, projection: str, count: int
                            ) -> list[PartitionRow]:
        """The projection's layout; created with `count` partitions, all at 0, if it has
        none. An existing layout is returned as it is, whatever `count` says: only
        `repartition` changes it. Run it in a transaction."""
        await self._lock_layout(ex, projection)
        rows = await self.layout(ex, projection)
        if rows:
            return rows
        parts = layout(count)
        await _run(
            ex,
            f"INSERT INTO {self.checkpoints} (projection, parts, part) "
            "SELECT %s, %s, i FROM unnest(%b::int[]) AS i ON CONFLICT DO NOTHING",
            (projection, count, [p.index for p in parts]),
        )
        return await self.layout(ex, projection)

    async def claim(self, ex: Executor, projection: str, partition: Partition = WHOLE, *,
                    owner: str | None = None) -> Claim:
        """Bump the partition's epoch (fencing every older claim) and say where it stands;
        creates the layout (`partition.count` partitions) if the projection has none. Raises
        PartitionGone if the layout has no such partition. Run it in a transaction."""
        await self.ensure_layout(ex, projection, partition.count)
        cur = await _run(
            ex,
            f"UPDATE {self.checkpoints} SET epoch = epoch + 1, owner = %s, updated_at = now() "
            "WHERE projection = %s AND parts = %s AND part = %s "
            "RETURNING epoch, last_seq, emitted_seq, state, cutover_seq",
            (owner, projection, partition.count, partition.index),
        )
        row = await cur.fetchone()
        if row is None:
            stored = sorted({r.partition.count for r in await self.layout(ex, projection)})
            raise PartitionGone(
                f"{projection} has no partition {partition.label}: it is split "
                f"{' and '.join(map(str, stored))} ways")
        return Claim(int(row[0]), int(row[1]), int(row[2]), str(row[3]),
                     None if row[4] is None else int(row[4]))

    async def commit(self, cur: AsyncCursor[Any], projection: str, epoch: int, seq: int, *,
                     partition: Partition = WHOLE) -> None:
        """Move the partition's checkpoint (and emitted_seq) to `seq` if `epoch` is still
        current, and announce it at commit; raise Fenced otherwise."""
        await cur.execute(
            f"UPDATE {self.checkpoints} SET last_seq = %s, "
            "emitted_seq = GREATEST(emitted_seq, %s), updated_at = now() "
            "WHERE projection = %s AND parts = %s AND part = %s AND epoch = %s "
            "RETURNING pg_notify(%s, %s)",
            (seq, seq, projection, partition.count, partition.index, epoch, CHANNEL,
             notification(self.schema, projection, seq)),
        )
        if cur.rowcount != 1:
            raise Fenced(f"epoch {epoch} is no longer current")

    async def lock_epoch(self, cur: AsyncCursor[Any], projection: str, epoch: int, *,
                         partition: Partition = WHOLE) -> None:
        """Hold the partition's row until commit; raise Fenced unless `epoch` is current."""
        await cur.execute(
            f"SELECT 1 FROM {self.checkpoints} WHERE projection = %s AND parts = %s "
            "AND part = %s AND epoch = %s FOR UPDATE",
            (projection, partition.count, partition.index, epoch),
        )
        if await cur.fetchone() is None:
            raise Fenced(f"epoch {epoch} is no longer current")

    async def epoch(self, ex: Executor, projection: str, partition: Partition = WHOLE
                    ) -> int | None:
        cur = await _run(ex, f"SELECT epoch FROM {self.checkpoints} WHERE projection = %s "
                             "AND parts = %s AND part = %s",
                         (projection, partition.count, partition.index))
        row = await cur.fetchone()
        return None if row is None else int(row[0])

    def last_seq_query(self, projection_param: str = "%s", slot_param: str | None = None
                       ) -> str:
        """`last_seq`'s query, the projection as `projection_param` (and the slot as
        `slot_param`), for a reader that reads the checkpoint in the same statement as the
        data it stamps (as a scalar subquery: NULL when there is no row)."""
        covering = "" if slot_param is None else f" AND mod({slot_param}, parts) = part"
        return (f"SELECT min(last_seq) FROM {self.checkpoints} "
                f"WHERE projection = {projection_param}{covering}")

    async def last_seq(self, ex: Executor, projection: str, slot: int | None = None
                       ) -> int | None:
        """How far the projection's view is: for the events of `slot`, the lowest checkpoint
        of the partitions reading it; without a slot, the lowest of all its partitions (None:
        never claimed)."""
        if slot is None:
            cur = await _run(ex, self.last_seq_query(), (projection,))
        else:
            cur = await _run(ex, self.last_seq_query("%s", "%s"), (projection, slot))
        row = await cur.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    async def reset(self, ex: Executor, projection: str, tables: Sequence[str] = (), *,
                    republish: bool = False, count: int | None = None) -> None:
        """Start the projection again from nothing: empty `tables`, forget what it applied and
        dead-lettered, and lay it out again with every partition at 0 and a new epoch
        (fencing live runners): `count` partitions, or as many as it has now (1 if it has no
        layout, or one in the middle of a repartition). `emitted_seq` stays, so a rebuild
        does not publish consequences a second time, unless `republish` (their ids derive
        from their causes: inside the stream's duplicate window the copies are dropped, which
        is how a test proves a replay emits the same ids)."""
        if tables:
            await _run(ex, f"TRUNCATE {', '.join(tables)}")
        await self.forget_tracking(ex, projection)
        await self._lock_layout(ex, projection)
        rows = await self.layout(ex, projection)
        counts = {r.partition.count for r in rows}
        if count is None:
            count = counts.pop() if len(counts) == 1 else 1
        emitted = 0 if republish else max((r.emitted_seq for r in rows), default=0)
        epoch = max((r.epoch for r in rows), default=0) + 1
        await _run(ex, f"DELETE FROM {self.checkpoints} WHERE projection = %s", (projection,))
        await _run(
            ex,
            f"INSERT INTO {self.checkpoints} (projection, parts, part, epoch, emitted_seq) "
            "SELECT %s, %s, i, %s, %s FROM unnest(%b::int[]) AS i",
            (projection, count, epoch, emitted, [p.index for p in layout(count)]),
        )
        await _run(ex, "SELECT pg_notify(%s, %s)",
                   (CHANNEL, notification(self.schema, projection, 0)))

    async def repartition(self, ex: Executor, projection: str, count: int, cutover: int
                          ) -> list[PartitionRow]:
        """Split the projection `count` ways from the stream sequence `cutover` on (or from the
        highest checkpoint of its partitions, if higher): its partitions drain up to the
        cutover, then the new ones take over after it. The old
        partitions' epochs are bumped (their runners claim again and see they drain). Raises
        LayoutBusy while an earlier repartition is still draining; a layout already `count`
        ways is left alone. Run it in a transaction."""
        await self._lock_layout(ex, projection)
        # FOR UPDATE: a batch committing meanwhile either committed before (its checkpoint is
        # read here) or waits and is then fenced by the epochs bumped below
        cur = await _run(ex, f"SELECT {_ROW} FROM {self.checkpoints} WHERE projection = %s "
                             "ORDER BY parts, part FOR UPDATE", (projection,))
        rows = [_row(r) for r in await cur.fetchall()]
        if not rows:
            return await self.ensure_layout(ex, projection, count)
        # nothing a partition already applied is handed to the new layout
        cutover = max([cutover, *(r.last_seq for r in rows)])
        if any(r.state != "active" for r in rows):
            raise LayoutBusy(f"{projection} is still being repartitioned "
                             f"({', '.join(f'{r.partition.label} {r.state}' for r in rows)})")
        if {r.partition.count for r in rows} == {count}:
            return rows
        emitted = max([cutover, *(r.emitted_seq for r in rows)])
        epoch = max((r.epoch for r in rows), default=0) + 1
        await _run(ex, f"UPDATE {self.checkpoints} SET state = 'draining', cutover_seq = %s, "
                       "epoch = epoch + 1, updated_at = now() WHERE projection = %s",
                   (cutover, projection))
        await _run(
            ex,
            f"INSERT INTO {self.checkpoints} "
            "(projection, parts, part, last_seq, epoch, emitted_seq, state) "
            "SELECT %s, %s, i, %s, %s, %s, %s FROM unnest(%b::int[]) AS i",
            (projection, count, cutover, epoch, emitted, "pending",
             [p.index for p in layout(count)]),
        )
        # rows already past the cutover (nothing of theirs was left to drain) go at once
        for row in rows:
            if row.last_seq >= cutover:
                await self._gone(ex, projection, row.partition)
        return await self.layout(ex, projection)

    async def finish_drain(self, cur: AsyncCursor[Any], projection: str, partition: Partition,
                           epoch: int, cutover: int) -> None:
        """A draining partition applied everything of its up to the cutover: it goes (fenced
        by `epoch`), and when it was the last, the pending partitions become active."""
        await self._lock_layout(cur, projection)
        await cur.execute(
            f"UPDATE {self.checkpoints} SET last_seq = %s, updated_at = now() "
            "WHERE projection = %s AND parts = %s AND part = %s AND epoch = %s "
            "AND state = 'draining' AND cutover_seq = %s",
            (cutover, projection, partition.count, partition.index, epoch, cutover))
        if cur.rowcount != 1:
            raise Fenced(f"epoch {epoch} of draining {partition.label} is no longer current")
        await self._gone(cur, projection, partition)
        await cur.execute("SELECT pg_notify(%s, %s)",
                          (CHANNEL, notification(self.schema, projection, cutover)))

    async def _gone(self, ex: Executor, projection: str, partition: Partition) -> None:
        await _run(ex, f"DELETE FROM {self.checkpoints} WHERE projection = %s AND parts = %s "
                       "AND part = %s", (projection, partition.count, partition.index))
        await _run(
            ex,
            f"UPDATE {self.checkpoints} SET state = 'active', updated_at = now() "
            "WHERE projection = %s AND state = 'pending' AND NOT EXISTS ("
            f"SELECT 1 FROM {self.checkpoints} WHERE projection = %s AND state = 'draining')",
            (projection, projection))

    async def progress(self, ex: Executor, projection: str) -> int:
        """A number that grows whenever any partition of the projection moves (the sum of
        their checkpoints): "did anything change since I last looked" for a whole view."""
        cur = await _run(ex, f"SELECT coalesce(sum(last_seq), 0) FROM {self.checkpoints} "
                             "WHERE projection = %s", (projection,))
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ membership

    async def renew(self, ex: Executor, member: str, lease_seconds: float, *, host: str = "",
                    pid: int = 0) -> list[str]:
        """Renew `member`'s lease (joining if new) and return the live members, by the
        database's clock (replicas' clocks never have to agree). Expired members long gone
        are swept."""
        await _run(
            ex,
            f"""INSERT INTO {self.members} AS m (member, host, pid, lease_until)
                VALUES (%s, %s, %s, now() + make_interval(secs => %s))
                ON CONFLICT (member) DO UPDATE SET lease_until = EXCLUDED.lease_until""",
            (member, host, pid, lease_seconds))
        await _run(ex, f"DELETE FROM {self.members} WHERE lease_until < now() - interval '1 day'")
        return await self.live_members(ex)

    async def live_members(self, ex: Executor) -> list[str]:
        cur = await _run(ex, f"SELECT member FROM {self.members} WHERE lease_until > now() "
                             "ORDER BY member")
        return [str(r[0]) for r in await cur.fetchall()]

    async def member_rows(self, ex: Executor) -> list[tuple[str, str, int, bool]]:
        """(member, host, pid, alive) of every member still remembered."""
        cur = await _run(ex, f"SELECT member, host, pid, lease_until > now() FROM {self.members} "
                             "ORDER BY member")
        return [(str(r[0]), str(r[1]), int(r[2]), bool(r[3])) for r in await cur.fetchall()]

    async def leave(self, ex: Executor, member: str) -> None:
        """`member` stops: the others take its partitions at their next renewal."""
        await _run(ex, f"DELETE FROM {self.members} WHERE member = %s", (member,))

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
                FROM unnest(%b::text[], %b::text[], %b::text[], %b::int8[]) AS k(t, u, e, s)
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
            # the detail can quote the event: sealed with the user's key, like their columns
            (projection, seq, event_id, reason, COLUMNS.seal(tenant_id, user_id, detail[:4000])
             if tenant_id and user_id else detail[:4000], tenant_id or "", user_id),
        )

    async def dead_letter_at(self, ex: Executor, projection: str, seq: int
                             ) -> DeadLetterRecord | None:
        cur = await _run(
            ex,
            f"SELECT seq, event_id, reason, detail, tenant_id, user_id FROM {self.dead_letters} "
            "WHERE projection = %s AND seq = %s", (projection, seq))
        row = await cur.fetchone()
        if row is None:
            return None
        return DeadLetterRecord(int(row[0]), row[1], row[2], _opened_detail(row[3], row[4], row[5]))

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


def _opened_detail(detail: str, tenant_id: str | None, user_id: str | None) -> str:
    if not tenant_id or not user_id:
        return detail
    try:
        return COLUMNS.open(tenant_id, user_id, detail)
    except Shredded:
        return "(the user was erased: the detail is unreadable)"
    except (LookupError, ValueError) as exc:  # KeyMissing, SealError, a KEK not here
        return f"(sealed; cannot be opened here: {exc})"
