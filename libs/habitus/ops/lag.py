"""How far each projection has come: the stream's last sequence on its subjects against its
checkpoint, its durable consumer's pending and unacknowledged deliveries, its dead letters.

`habitus lag` prints it and `habitus demo` shows it while the system catches up; both read it
from here, so the two can never measure differently. The flow (which projections there are, in
which order) is the installed services' (`habitus.service.registry.topology`); checkpoints are
read through the checkpoint store, never by spelling its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from nats.js.errors import NotFoundError

from habitus.bus.streams import DLQ
from habitus.projection.base import durable_for
from habitus.projection.checkpoints import CheckpointStore
from habitus.service.projections import resolve
from habitus.service.registry import topology
from habitus.subjects import DLQ_ROOT


@dataclass
class Lag:
    projection: str
    schema: str
    stream: str
    durable: str
    #: the stream's last sequence on the projection's subjects (0: none there)
    stream_seq: int
    #: the checkpoint row's last_seq; None: no row (never claimed) or no table
    checkpoint: int | None
    #: the durable consumer's undelivered and unacknowledged messages; None: no consumer
    pending: int | None
    ack_pending: int | None
    dead_letters: int

    @property
    def behind(self) -> int | None:
        """Stream sequences between the checkpoint and the last event it reads (0: caught
        up); not a count of events (other subjects' events lie in between)."""
        return None if self.checkpoint is None else max(0, self.stream_seq - self.checkpoint)


def durable_of(name: str) -> str:
    """The durable consumer of a projection (as `Projection.durable` names it)."""
    try:
        return resolve(name).durable
    except Exception:
        return durable_for(name)


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
    """(schema, projection) -> its checkpoint, for those of `projections` with a row (a
    schema not migrated has none)."""
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


async def measure(nc: Any, database_url: str, names: list[str] | None = None) -> list[Lag]:
    """The lag of every installed projection (or of `names`), in flow order."""
    infos = topology().in_flow_order()
    if names:
        unknown = sorted(set(names) - {p.name for p in infos})
        if unknown:
            raise LookupError(f"unknown projection(s) {', '.join(unknown)} (known: "
                              f"{', '.join(sorted(p.name for p in infos))})")
        infos = [p for p in infos if p.name in names]
    js = nc.jetstream()
    rows = await checkpoints(database_url, [(p.schema, p.name) for p in infos])
    dead = await dlq_counts(js)
    out = []
    for p in infos:
        durable = durable_of(p.name)
        pending: int | None
        ack_pending: int | None
        try:
            info = await js.consumer_info(p.stream, durable)
            pending, ack_pending = int(info.num_pending or 0), int(info.num_ack_pending or 0)
        except NotFoundError:
            pending = ack_pending = None
        out.append(Lag(p.name, p.schema, p.stream, durable,
                       await last_seq_on(js, p.stream, p.filter_subjects()),
                       rows.get((p.schema, p.name)), pending, ack_pending,
                       dead.get(durable, 0)))
    return out
