"""What the runner records beside the checkpoint: applied ids and dead letters.

* A copy of an event re-published after JetStream's duplicate window is stored by the stream a
  second time; the projection must recognise its id and change nothing.
* An event whose data the database can never store (a NUL byte: a `DataError`) is poison at
  once: dead-lettered on its first delivery, not after `max_deliver` paced retries, and the
  events after it (another tenant's among them) still apply.
* A command waiting for its event learns that it was dead-lettered, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from psycopg import AsyncCursor

from habitus.bus import DLQ
from habitus.bus.publisher import headers_for
from habitus.bus.streams import INGEST
from habitus.cli.dlq import opened_detail
from habitus.events import CATALOG
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.projection import dlq as dlqh
from habitus.projection.checkpoints import checkpoint_ddl, tracking_ddl
from habitus.projection.wait import DeadLettered, wait_applied
from habitus.subjects import INGEST_ROOT
from tests.integration.runner_support import FAST, new_tally, publish, run_to_end
from tests.support.factories import turn, unique
from tests.support.streams import fetch_all
from tests.support.tally import fold, read_counts, read_seen

pytestmark = pytest.mark.asyncio


async def republish_past_window(nc: Any, event: Any) -> int:
    """Store `event` again as the stream would once its duplicate window has passed: the
    same event (same id), under a message id the stream has not seen."""
    headers = headers_for(event) | {"Nats-Msg-Id": unique("late")}
    ack = await nc.jetstream().publish(CATALOG.subject(event), event.to_json(),
                                       stream=INGEST, headers=headers)
    assert not ack.duplicate
    return int(ack.seq)


async def test_a_copy_republished_past_the_duplicate_window_changes_nothing(
        nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, "u1") for _ in range(5)]
    await publish(nc, events)
    await run_to_end(projection, nc, pool)
    before = await read_seen(pool, projection.schema)

    late_seq = await republish_past_window(nc, events[2])
    await publish(nc, [turn(tenant, "u1")])  # something after it still applies
    runner = await run_to_end(projection, nc, pool)

    counts = await read_counts(pool, projection.schema)
    assert counts == {"u1": 6}
    seen = await read_seen(pool, projection.schema)
    assert seen[:5] == before
    assert late_seq not in [s for _, s, _ in seen]
    assert runner._checkpoint > late_seq
    # skipped, not failed: the tally's primary key would reject a second apply
    assert await fetch_all(nc, DLQ, f"habitus.v1.dlq.{projection.durable}.>", wait=0.3) == []


async def test_a_copy_in_the_same_batch_as_its_original_applies_once(nc: Any, pool: Any
                                                                     ) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, "u1") for _ in range(3)]
    await publish(nc, events)
    await republish_past_window(nc, events[0])
    await run_to_end(projection, nc, pool)
    assert await read_counts(pool, projection.schema) == fold(events)
    assert await fetch_all(nc, DLQ, f"habitus.v1.dlq.{projection.durable}.>", wait=0.3) == []


class TextProjection(Projection):
    """Stores each turn's user message as text: a NUL byte is a DataError in Postgres."""

    def __init__(self, tenant_id: str):
        self.schema = unique("texts")
        self.name = f"tests.{self.schema}"
        self.stream = INGEST
        self.filter_subjects = [f"{INGEST_ROOT}.turn.{tenant_id}.*.*.*"]
        self.tables = [f"{self.schema}.texts"]

    def ddl(self) -> list[str]:
        return [*checkpoint_ddl(self.schema), *tracking_ddl(self.schema),
                f"CREATE TABLE {self.schema}.texts (event_id text PRIMARY KEY, body text)"]

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        await cur.executemany(
            f"INSERT INTO {self.schema}.texts (event_id, body) VALUES (%s, %s)",
            [(d.event.event_id, d.event.payload.user_message) for d in batch])


async def texts(pool: Any, schema: str) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT body FROM {schema}.texts ORDER BY body")
        return [r[0] for r in await cur.fetchall()]


async def test_unstorable_data_is_dead_lettered_on_its_first_delivery(nc: Any, pool: Any
                                                                      ) -> None:
    tenant = unique("t")
    projection = TextProjection(tenant)
    async with pool.connection() as conn:
        for stmt in projection.ddl():
            await conn.execute(stmt)
        await conn.commit()
    bad = turn(tenant, "u1", "nul \x00 byte")
    results = await publish(nc, [turn(tenant, "u1", "before"), bad, turn(tenant, "u2", "after")])
    bad_seq = results[1].seq
    # Retries would take many seconds with these delays; a DataError must not wait for them.
    slow = FAST.__class__(**{**FAST.__dict__, "max_deliver": 50, "retry_delays": (30.0,)})

    await run_to_end(projection, nc, pool, config=slow)

    assert await texts(pool, projection.schema) == ["after", "before"]
    letters = await fetch_all(nc, DLQ, f"habitus.v1.dlq.{projection.durable}.>", wait=0.5)
    assert len(letters) == 1
    assert letters[0].headers[dlqh.DELIVERIES] == "1"
    assert "DataError" in opened_detail(letters[0].headers[dlqh.DETAIL],
                                        letters[0].headers[dlqh.ORIGINAL_SUBJECT])
    with pytest.raises(DeadLettered) as caught:
        await wait_applied(pool, projection.schema, projection.name, bad_seq, timeout=5)
    assert caught.value.record.event_id == bad.event_id
    assert "NUL" in caught.value.record.detail
    await wait_applied(pool, projection.schema, projection.name, results[2].seq, timeout=5)
