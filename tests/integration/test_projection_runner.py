"""The projection runner against real NATS JetStream and Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from habitus.bus import DLQ
from habitus.cli.dlq import opened_detail
from habitus.crypto.columns import is_sealed
from habitus.events import CATALOG
from habitus.projection import ProjectionRunner
from habitus.projection import dlq as dlqh
from habitus.projection.replay import replay
from habitus.subjects import ingest_subject, parse_subject, slot_of, tenant_slot_of
from tests.integration.runner_support import FAST, eventually, new_tally, publish, run_to_end
from tests.support.factories import turn
from tests.support.streams import fetch_all
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = pytest.mark.asyncio


async def dlq_messages(nc: Any, consumer: str) -> list[Any]:
    return await fetch_all(nc, DLQ, f"habitus.v1.dlq.{consumer}.>", wait=0.5)


async def test_each_event_applied_once_even_when_published_twice(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, f"u{i % 3}") for i in range(30)]
    first = await publish(nc, events)
    again = await publish(nc, events[:10])  # a client retrying part of its batch

    assert not any(r.duplicate for r in first)
    assert all(r.duplicate for r in again)

    await run_to_end(projection, nc, pool)

    assert await read_counts(pool, projection.schema) == fold(events)
    assert len(await read_seen(pool, projection.schema)) == 30


async def test_redelivered_messages_change_nothing(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, "u1") for _ in range(20)]
    await publish(nc, events)
    outcomes: list[Any] = []

    class LosesFirstAcks(ProjectionRunner):
        """The commit happens but the first ack of every event is lost on the way."""

        lost: set[int] = set()

        async def _ack(self, items: Any) -> None:
            kept = [i for i in items if i.seq in self.lost]
            self.lost.update(i.seq for i in items)
            await super()._ack(kept)

        async def handle_batch(self, msgs: Any) -> Any:
            outcome = await super().handle_batch(msgs)
            outcomes.append(outcome)
            return outcome

    runner = LosesFirstAcks(projection, nc, pool, config=FAST)
    runner.start()
    # After ack_wait the server delivers all 20 again; the runner must skip every one.
    await eventually(lambda: _skipped(outcomes, 20), timeout=30)
    await runner.stop()

    assert sum(o.applied for o in outcomes) == 20
    assert await read_counts(pool, projection.schema) == {"u1": 20}


async def _skipped(outcomes: list[Any], n: int) -> bool:
    return sum(o.skipped for o in outcomes) >= n


async def _count_is(pool: Any, schema: str, n: int) -> bool:
    counts = await read_counts(pool, schema)
    return sum(counts.values()) == n


async def test_poison_event_goes_to_dlq_and_later_events_still_apply(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    before = [turn(tenant, "u1") for _ in range(5)]
    poison = turn(tenant, "u1", "POISON")
    after = [turn(tenant, "u2") for _ in range(5)]
    await publish(nc, [*before, poison, *after])

    runner = await run_to_end(projection, nc, pool)

    assert await read_counts(pool, projection.schema) == {"u1": 5, "u2": 5}
    letters = await dlq_messages(nc, projection.durable)
    assert len(letters) == 1
    letter = letters[0]
    assert letter.headers[dlqh.REASON] == "apply_failed"
    # the detail can quote the event: sealed with the user's key, opened by `dlq list`
    assert is_sealed(letter.headers[dlqh.DETAIL])
    assert "PoisonError" in opened_detail(letter.headers[dlqh.DETAIL],
                                          letter.headers[dlqh.ORIGINAL_SUBJECT])
    # the subject as the stream stored it: the published one and the user's and tenant's slots
    stored = parse_subject(letter.headers[dlqh.ORIGINAL_SUBJECT])
    assert stored.published == ingest_subject("turn", tenant, "u1")
    assert (stored.user_slot, stored.tenant_slot) == (slot_of(tenant, "u1"),
                                                      tenant_slot_of(tenant))
    assert int(letter.headers[dlqh.DELIVERIES]) >= FAST.max_deliver
    assert json.loads(letter.data)["event_id"] == poison.event_id
    assert runner._checkpoint > 0


async def test_invalid_event_is_dead_lettered_at_once(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    good = turn(tenant, "u1")
    js = nc.jetstream()
    bad_body = json.dumps({"type": "TurnRecorded", "event_id": "not-an-id", "payload": {}})
    ack = await js.publish(ingest_subject("turn", tenant, "u1"), bad_body.encode())
    await publish(nc, [good])

    await run_to_end(projection, nc, pool)

    assert await read_counts(pool, projection.schema) == {"u1": 1}
    letters = await dlq_messages(nc, projection.durable)
    assert [m.headers[dlqh.REASON] for m in letters] == ["invalid_event"]
    assert letters[0].headers[dlqh.ORIGINAL_SEQ] == str(ack.seq)
    assert letters[0].headers[dlqh.DELIVERIES] == "1"  # not retried: it can never succeed
    assert "event_id" in opened_detail(letters[0].headers[dlqh.DETAIL],
                                       letters[0].headers[dlqh.ORIGINAL_SUBJECT])


async def test_replay_rebuilds_an_identical_projection(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, f"u{i % 4}") for i in range(50)]
    await publish(nc, events)
    await run_to_end(projection, nc, pool)
    before = (await read_counts(pool, projection.schema), await read_seen(pool, projection.schema))

    result = await replay(projection, nc, pool, config=FAST, timeout=60)

    assert result.rebuilt_here
    after = (await read_counts(pool, projection.schema), await read_seen(pool, projection.schema))
    assert after == before
    assert before[0] == fold(events)


async def test_replay_while_a_runner_is_live_fences_it_and_it_rebuilds(nc: Any, pool: Any
                                                                        ) -> None:
    projection, tenant = await new_tally(pool)
    events = [turn(tenant, "u1") for _ in range(10)]
    await publish(nc, events)
    live = ProjectionRunner(projection, nc, pool, config=FAST)
    live.start()
    await eventually(lambda: _count_is(pool, projection.schema, 10))

    result = await replay(projection, nc, pool, config=FAST)
    assert not result.rebuilt_here  # the live runner holds the lock

    await publish(nc, [turn(tenant, "u1")])
    await eventually(lambda: _count_is(pool, projection.schema, 11))
    await live.stop()
    assert await read_counts(pool, projection.schema) == {"u1": 11}
    assert [s for _, s, _ in await read_seen(pool, projection.schema)] == sorted(
        s for _, s, _ in await read_seen(pool, projection.schema)
    )


async def test_only_one_runner_applies_at_a_time(nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    await publish(nc, [turn(tenant, f"u{i % 5}") for i in range(300)])
    a = ProjectionRunner(projection, nc, pool, config=FAST)
    b = ProjectionRunner(projection, nc, pool, config=FAST)
    a.start()
    b.start()
    await eventually(lambda: _count_is(pool, projection.schema, 300))
    assert a.leader.is_set() != b.leader.is_set()
    await asyncio.gather(a.stop(), b.stop())
    assert sum((await read_counts(pool, projection.schema)).values()) == 300


async def test_an_event_whose_key_cannot_be_found_waits_for_it_and_is_never_dead_lettered(
        nc: Any, pool: Any) -> None:
    """A key store that lacks a key nobody destroyed (a volume not mounted, a file restored
    late) is the deployment's fault: what comes before applies, the event and those after it
    wait, and once the key is back they apply; nothing goes to the DLQ."""
    keyring = CATALOG.keyring
    assert keyring is not None  # the suite seals every user's payload
    projection, tenant = await new_tally(pool)
    before = [turn(tenant, "u1") for _ in range(3)]
    ghost, after = turn(tenant, "ghost"), [turn(tenant, "u1") for _ in range(2)]
    await publish(nc, [*before, ghost, *after])
    runner = ProjectionRunner(projection, nc, pool, config=FAST)
    with key_file_away(keyring, tenant, "ghost") as restore:
        runner.start()
        try:
            await eventually(lambda: _counts_are(pool, projection.schema, {"u1": 3}))
            await asyncio.sleep(1.0)  # several rewinds (FAST waits 0.2 s between them)
            assert await read_counts(pool, projection.schema) == {"u1": 3}
            assert await dlq_messages(nc, projection.durable) == []
            restore()  # the key store is back
            await eventually(lambda: _counts_are(pool, projection.schema,
                                                 {"u1": 5, "ghost": 1}))
        finally:
            await runner.stop()
    assert await dlq_messages(nc, projection.durable) == []


async def _counts_are(pool: Any, schema: str, expected: dict[str, int]) -> bool:
    return await read_counts(pool, schema) == expected


async def test_an_event_whose_key_stays_unreadable_goes_to_the_dlq_after_the_wait(
        nc: Any, pool: Any) -> None:
    """A key lost for good (or a body naming a key that is not its user's) must not stop the
    partition forever: after `key_wait_seconds` the event is dead-lettered, saying why, and
    those after it apply."""
    keyring = CATALOG.keyring
    assert keyring is not None
    projection, tenant = await new_tally(pool)
    lost, after = turn(tenant, "lost"), [turn(tenant, "u1") for _ in range(2)]
    await publish(nc, [turn(tenant, "u1"), lost, *after])
    with key_file_away(keyring, tenant, "lost"):
        await run_to_end(projection, nc, pool, config=replace(FAST, key_wait_seconds=0.5))

    assert await read_counts(pool, projection.schema) == {"u1": 3}
    [letter] = await dlq_messages(nc, projection.durable)
    assert json.loads(letter.data)["event_id"] == lost.event_id
    detail = opened_detail(letter.headers[dlqh.DETAIL], letter.headers[dlqh.ORIGINAL_SUBJECT])
    assert "could not be read for 0.5 s" in detail and "KeyMissing" in detail, detail


@contextmanager
def key_file_away(keyring: Any, tenant: str, user: str) -> Iterator[Callable[[], None]]:
    """The user's key file moved out of the store (and this process's copy forgotten) while
    the block runs; it yields a function that puts it back, which leaving the block does in
    any case: the user's events stay in the worker's streams, and every later stack reading
    them would wait for the key."""
    key_file = keyring.store.path(tenant, user)
    away = key_file.with_suffix(".away")
    key_file.rename(away)
    keyring.forget(tenant, user)

    def restore() -> None:
        if away.exists():
            away.rename(key_file)

    try:
        yield restore
    finally:
        restore()


class AheadTally(TallyProjection):
    """A tally told of each batch before applying it; its first notice fails."""

    def __init__(self, schema: str, tenant_id: str):
        super().__init__(schema, tenant_id)
        self.noticed: list[str] = []
        self.applied: list[list[str]] = []
        self.notices = 0

    def ahead(self, batch: Any) -> None:
        self.notices += 1
        if self.notices == 1:
            raise RuntimeError("work ahead failed")
        self.noticed += [d.event.event_id for d in batch]

    async def apply_batch(self, cur: Any, batch: Any, ctx: Any) -> None:
        self.applied.append([d.event.event_id for d in batch])
        await super().apply_batch(cur, batch, ctx)


async def test_each_batch_is_announced_ahead_of_its_apply_and_a_failing_notice_stops_nothing(
        nc: Any, pool: Any) -> None:
    projection, tenant = await new_tally(pool)
    projection = AheadTally(projection.schema, tenant)
    events = [turn(tenant, f"u{i % 4}") for i in range(450)]  # three batches of FAST's 200
    await publish(nc, events)

    await run_to_end(projection, nc, pool)

    assert await read_counts(pool, projection.schema) == fold(events)  # all applied
    assert len(projection.applied) >= 3 and projection.notices >= len(projection.applied)
    first, *rest = projection.applied  # the batch whose notice failed was applied all the same
    assert not set(first) & set(projection.noticed)
    assert all(set(batch) <= set(projection.noticed) for batch in rest)
