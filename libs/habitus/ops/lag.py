"""How far each projection has come: the stream's last sequence on its subjects against its
checkpoint, its durable consumer's pending and unacknowledged deliveries, its dead letters;
and, per partition (`partitions`, what `habitus partitions` shows), who applies it and how far
it is.

`habitus lag` prints it and `habitus demo` shows it while the system catches up; both read it
from here, so the two can never measure differently. The flow (which projections there are, in
which order) is the installed services' (`habitus.service.registry.topology`); checkpoints are
read through the checkpoint store, never by spelling its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from habitus.bus.streams import DLQ
from habitus.projection.base import durable_for
from habitus.projection.checkpoints import CheckpointStore
from habitus.service.partitions import PartitionState, installed, last_seq_on, states
from habitus.service.projections import resolve
from habitus.subjects import DLQ_ROOT

__all__ = ("Lag", "PartitionState", "checkpoints", "dlq_counts", "last_seq_on", "measure",
           "partitions")


@dataclass
class Lag:
    """A whole projection: its partitions taken together."""

    projection: str
    schema: str
    stream: str
    durable: str
    #: the stream's last sequence on the projection's subjects (0: none there)
    stream_seq: int
    #: the lowest partition checkpoint (everything up to it is applied); None: no row (never
    #: claimed) or no table
    checkpoint: int | None
    #: undelivered and unacknowledged messages of its consumers; None: no consumer
    pending: int | None
    ack_pending: int | None
    dead_letters: int
    #: how many partitions it has (more while it is being repartitioned)
    partitions: int = 1
    #: the partitions' own sequences behind, summed (what `behind` is when partitioned)
    partitions_behind: int | None = None

    @property
    def behind(self) -> int | None:
        """Stream sequences between the checkpoint and the last event it reads (0: caught
        up); not a count of events (other subjects' events lie in between). Partitioned,
        the partitions' own distances summed."""
        if self.checkpoint is None:
            return None
        if self.partitions_behind is not None:
            return self.partitions_behind
        return max(0, self.stream_seq - self.checkpoint)


def durable_of(name: str) -> str:
    """The durable consumer of a projection (as `Projection.durable` names it)."""
    try:
        return resolve(name).durable
    except Exception:
        return durable_for(name)


async def dlq_counts(js: Any) -> dict[str, int]:
    """Dead letters in HABITUS_DLQ per consumer (from the subjects' counts)."""
    info = await js.stream_info(DLQ, subjects_filter=f"{DLQ_ROOT}.>")
    counts: dict[str, int] = {}
    prefix = DLQ_ROOT + "."
    for subject, n in (info.state.subjects or {}).items():
        consumer = subject.removeprefix(prefix).split(".", 1)[0]
        counts[consumer] = counts.get(consumer, 0) + int(n)
    return counts


async def checkpoints(database_url: str, projections: list[tuple[str, str]]
                      ) -> dict[tuple[str, str], int]:
    """(schema, projection) -> its checkpoint (the lowest of its partitions), for those of
    `projections` with a row (a schema not migrated has none)."""
    out: dict[tuple[str, str], int] = {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for schema, name in projections:
            try:
                last = await CheckpointStore(schema).last_seq(conn, name)
            except psycopg.errors.UndefinedTable:
                continue
            if last is not None:
                out[(schema, name)] = last
    return out


async def partitions(nc: Any, database: str | psycopg.AsyncConnection[Any],
                     names: list[str] | None = None) -> list[PartitionState]:
    """Every partition of every installed projection (or of `names`), in flow order.
    `database`: a connection string (a connection is made for the call), or an open
    autocommit connection, for a caller that measures again and again (the demo's wait,
    the load run's sampling) and should not connect each time."""
    if not isinstance(database, str):
        return await states(nc.jetstream(), database, names)
    async with await psycopg.AsyncConnection.connect(database, autocommit=True) as conn:
        return await states(nc.jetstream(), conn, names)


async def measure(nc: Any, database: str | psycopg.AsyncConnection[Any],
                  names: list[str] | None = None) -> list[Lag]:
    """The lag of every installed projection (or of `names`), in flow order: its partitions
    taken together."""
    infos = installed(names)
    js = nc.jetstream()
    dead = await dlq_counts(js)
    parts: dict[str, list[PartitionState]] = {}
    for part in await partitions(nc, database, [p.name for p in infos]):
        parts.setdefault(part.projection, []).append(part)
    out = []
    for p in infos:
        durable = durable_of(p.name)
        mine = parts.get(p.name, [])
        consumers = [x for x in mine if x.pending is not None]
        whole = len(mine) == 1 and mine[0].partition == "0/1"
        out.append(Lag(
            p.name, p.schema, p.stream, durable,
            mine[0].stream_seq if whole else await last_seq_on(js, p.stream,
                                                               p.filter_subjects()),
            min((x.checkpoint for x in mine), default=None),
            sum(x.pending or 0 for x in consumers) if consumers else None,
            sum(x.ack_pending or 0 for x in consumers) if consumers else None,
            sum(n for consumer, n in dead.items()
                if consumer == durable or consumer.startswith(durable + "__p")),
            len(mine) or 1,
            sum(x.behind for x in mine) if len(mine) > 1 else None))
    return out
