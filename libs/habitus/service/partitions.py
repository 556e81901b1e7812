"""The installed projections' partitions: who applies each, how far it is, and changing how
many there are.

`states` is what `habitus partitions` prints and `admin.partitions` answers: per projection and
partition, its state, the replica that claimed it last and whether that replica's lease is
alive, its checkpoint, the stream's last sequence on its subjects and its consumer's pending
deliveries. `repartition` is the one way a projection's count changes: the stream's end at that
moment becomes the cutover, the old partitions drain up to it and the new ones start after it
(`habitus.projection.checkpoints`), while the replicas keep running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from nats.js.errors import NotFoundError
from psycopg import AsyncConnection

from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.consumer import durable_name
from habitus.projection.partitions import check_count
from habitus.service.projections import resolve
from habitus.service.registry import topology
from habitus.topology import ProjectionInfo


@dataclass
class PartitionState:
    projection: str
    schema: str
    stream: str
    partition: str
    durable: str
    #: "active"; "draining" (up to `cutover`, then gone); "pending" (waits for the drain)
    state: str
    #: the replica that claimed it last, and whether its lease is alive
    owner: str | None
    owner_alive: bool
    #: the stream's last sequence on the partition's subjects (0: none there); while a split
    #: projection's partition has deliveries pending, the last on the whole projection's
    #: subjects (an upper bound: one get per event type, not one per type and slot)
    stream_seq: int
    checkpoint: int
    #: its consumer's undelivered and unacknowledged messages; None: no consumer now
    pending: int | None
    ack_pending: int | None
    cutover: int | None = None

    @property
    def behind(self) -> int:
        """Stream sequences between the checkpoint and the last event it reads (0: caught
        up; a pending partition is not behind: the drain before it is)."""
        if self.state == "pending":
            return 0
        top = self.stream_seq if self.cutover is None else min(self.stream_seq, self.cutover)
        return max(0, top - self.checkpoint)

    def as_dict(self) -> dict[str, Any]:
        return {"projection": self.projection, "partition": self.partition,
                "state": self.state, "owner": self.owner, "owner_alive": self.owner_alive,
                "checkpoint": self.checkpoint, "stream_seq": self.stream_seq,
                "behind": self.behind, "pending": self.pending,
                "ack_pending": self.ack_pending, "cutover": self.cutover,
                "stream": self.stream, "durable": self.durable}


def installed(names: list[str] | None = None) -> list[ProjectionInfo]:
    """The installed projections (or those of `names`), in flow order; LookupError names an
    unknown one."""
    infos = topology().in_flow_order()
    if names:
        unknown = sorted(set(names) - {p.name for p in infos})
        if unknown:
            raise LookupError(f"unknown projection(s) {', '.join(unknown)} (known: "
                              f"{', '.join(sorted(p.name for p in infos))})")
        infos = [p for p in infos if p.name in names]
    return infos


async def last_seq_on(js: Any, stream: str, subjects: list[str]) -> int:
    """The highest stream sequence of a message on any of `subjects` (wildcards allowed)."""
    best = 0
    for subject in subjects:
        try:
            msg = await js.get_last_msg(stream, subject)
        except NotFoundError:
            continue
        best = max(best, int(msg.seq or 0))
    return best


async def states(js: Any, conn: AsyncConnection[Any], names: list[str] | None = None
                 ) -> list[PartitionState]:
    """Every partition of every installed projection (or of `names`), in flow order; a schema
    not migrated has none. `conn`: autocommit."""
    infos = installed(names)
    out: list[PartitionState] = []
    rows: dict[tuple[str, str], list[Any]] = {}
    alive: dict[str, set[str]] = {}
    for schema in sorted({p.schema for p in infos}):
        store = CheckpointStore(schema)
        try:
            found = await store.layouts(conn)
            alive[schema] = set(await store.live_members(conn))
        except psycopg.errors.UndefinedTable:
            continue
        for name, layout in found.items():
            rows[(schema, name)] = layout
    for info in infos:
        projection = resolve(info.name)
        whole: int | None = None  # the stream's last sequence on the projection's subjects
        for row in rows.get((info.schema, info.name), []):
            durable = durable_name(projection, row.partition)
            pending: int | None = None
            ack_pending: int | None = None
            delivered = 0
            try:
                ci = await js.consumer_info(info.stream, durable)
                pending, ack_pending = int(ci.num_pending or 0), int(ci.num_ack_pending or 0)
                delivered = int(ci.delivered.stream_seq or 0) if ci.delivered else 0
            except NotFoundError:
                pass
            if pending == 0 and ack_pending == 0 and not row.partition.whole:
                # everything on its subjects was delivered: the last delivery is their end
                last = max(delivered, row.last_seq)
            else:
                if whole is None:
                    whole = await last_seq_on(js, info.stream, list(projection.filter_subjects))
                last = whole  # exact when whole; a bound while a partition has work left
            out.append(PartitionState(
                info.name, info.schema, info.stream, row.partition.label, durable, row.state,
                row.owner, row.owner in alive.get(info.schema, set()), last, row.last_seq,
                pending, ack_pending, row.cutover_seq))
    return out


@dataclass(frozen=True)
class Repartitioned:
    projection: str
    count: int
    #: the stream sequence up to which the old partitions apply, after which the new ones do
    cutover: int
    #: the partitions now (old ones draining, new ones pending, or the new ones at once)
    partitions: list[str]


async def repartition(js: Any, conn: AsyncConnection[Any], name: str, count: int
                      ) -> Repartitioned:
    """Split the installed projection `name` `count` ways from the stream's end on (see the
    module). Raises LookupError (unknown projection), ValueError (a count that is not one of
    1, 2, 4, 8, 16), `LayoutBusy` (an earlier repartition still draining)."""
    [info] = installed([name])
    check_count(count)
    cutover = int((await js.stream_info(info.stream)).state.last_seq or 0)
    async with conn.transaction():
        rows = await CheckpointStore(info.schema).repartition(conn, name, count, cutover)
    moved = max((r.cutover_seq or 0 for r in rows), default=cutover)
    return Repartitioned(name, count, moved or cutover,
                         [f"{r.partition.label} {r.state}" for r in rows])
