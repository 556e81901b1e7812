"""A deliberately naive test projection: it adds 1 per applied event and records each event's id
with a primary key. It relies on the runner alone for exactly-once, so a double apply shows up
as a wrong count or a unique violation, and a lost event as a missing row.

An event whose user_message is "POISON" always raises, to exercise the DLQ path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.bus.streams import INGEST
from habitus.events import Event
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.subjects import INGEST_ROOT


class PoisonError(RuntimeError):
    pass


class TallyProjection(Projection):
    def __init__(self, schema: str, tenant_id: str):
        self.name = f"tests.{schema}"
        self.schema = schema
        self.stream = INGEST
        self.filter_subjects = [f"{INGEST_ROOT}.turn.{tenant_id}.*.*.*"]
        self.tables = [f"{schema}.counts", f"{schema}.seen"]

    def ddl(self) -> list[str]:
        from habitus.projection.checkpoints import checkpoint_ddl, tracking_ddl

        return [
            *checkpoint_ddl(self.schema),
            *tracking_ddl(self.schema),
            f"""CREATE TABLE IF NOT EXISTS {self.schema}.counts (
                tenant_id text NOT NULL, user_id text NOT NULL, n bigint NOT NULL,
                PRIMARY KEY (tenant_id, user_id))""",
            f"""CREATE TABLE IF NOT EXISTS {self.schema}.seen (
                event_id text PRIMARY KEY, seq bigint NOT NULL, user_id text NOT NULL)""",
        ]

    async def apply_batch(
        self, cur: AsyncCursor[Any], batch: Sequence[Delivered], ctx: ApplyContext
    ) -> None:
        for d in batch:
            if getattr(d.event.payload, "user_message", None) == "POISON":
                raise PoisonError(f"poison event {d.event.event_id}")
        async with cur.copy(f"COPY {self.schema}.seen (event_id, seq, user_id) FROM STDIN") as cp:
            for d in batch:
                await cp.write_row((d.event.event_id, d.seq, d.event.user_id))
        per_user = Counter((d.event.tenant_id, d.event.user_id) for d in batch)
        await cur.executemany(
            f"""INSERT INTO {self.schema}.counts (tenant_id, user_id, n) VALUES (%s, %s, %s)
                ON CONFLICT (tenant_id, user_id) DO UPDATE SET n = counts.n + EXCLUDED.n""",
            [(t, u, n) for (t, u), n in per_user.items()],
        )


def fold(events: Iterable[Event[Any]]) -> dict[str, int]:
    """The reference: per-user counts of distinct, non-poison events."""
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for e in events:
        if e.event_id in seen or getattr(e.payload, "user_message", None) == "POISON":
            continue
        seen.add(e.event_id)
        counts[e.user_id] += 1
    return dict(counts)


async def read_counts(pool: Any, schema: str) -> dict[str, int]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT user_id, n FROM {schema}.counts")
        return {u: int(n) for u, n in await cur.fetchall()}


async def read_seen(pool: Any, schema: str) -> list[tuple[str, int, str]]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT event_id, seq, user_id FROM {schema}.seen ORDER BY seq")
        return [(e, int(s), u) for e, s, u in await cur.fetchall()]


def from_env() -> TallyProjection:
    """Factory for `habitus replay tests.support.tally:from_env` in CLI tests."""
    import os

    return TallyProjection(os.environ["TALLY_SCHEMA"], os.environ["TALLY_TENANT"])
