"""Properties of the projection runner's core, against real Postgres, with simulated deliveries.

No NATS consumer is involved: a small simulated consumer hands `ProjectionRunner.handle_batch`
fake messages (stream sequences 1..N in publish order) in random batches, delivers some of them
again, loses acks, and "crashes" the runner at random points (the runner object is dropped, its
advisory-lock session ends, and a new runner claims the checkpoint).

Deliveries come in stream order, messages delivered but never acknowledged before any new one:
the order the runner relies on (a new claim starts the consumer again at checkpoint + 1; a nak
holds back later events). Whether the real consumer keeps that order across a kill -9 is
tested against NATS in tests/chaos/test_runner_sigkill.py.

The view is the naive TallyProjection (tests/support/tally.py): it counts every apply and keeps
one `seen` row per event under a primary key, so a double apply or a lost event shows up as a
wrong count, a missing row, or a failed batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js.api import AckPolicy

from habitus.bus.publisher import headers_for
from habitus.events import CATALOG, Event
from habitus.projection import ProjectionRunner
from habitus.projection.checkpoints import checkpoint_table
from habitus.projection.replay import reset_projection
from habitus.projection.runner import BatchOutcome, Fenced, Rewind
from tests.integration.runner_support import FAST, new_tally
from tests.support.factories import turn
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = pytest.mark.asyncio

USERS = ("u1", "u2", "u3", "u4", "u5")
PROPERTY_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ---------------------------------------------------------------------------- fake deliveries


class FakeMsg:
    """What the runner reads from a nats-py JetStream message, and records what it answers."""

    def __init__(self, consumer: FakeConsumer, seq: int, *, lose_ack: bool = False):
        event = consumer.events[seq - 1]
        consumer.deliveries[seq] += 1
        self._consumer = consumer
        self._lose_ack = lose_ack
        self.seq = seq
        self.answers: list[str] = []
        self.data = event.to_json()
        self.subject = CATALOG.subject(event)
        self.headers = headers_for(event)
        self.metadata = SimpleNamespace(
            sequence=SimpleNamespace(stream=seq, consumer=sum(consumer.deliveries.values())),
            num_delivered=consumer.deliveries[seq],
            num_pending=len(consumer.events) - seq,
        )
        # the JetStream ack subject the runner parses: stream, consumer, delivered, stream seq,
        # consumer seq, timestamp, pending
        self.reply = (f"$JS.ACK.HABITUS_INGEST.fake.{self.metadata.num_delivered}.{seq}."
                      f"{self.metadata.sequence.consumer}.0.{self.metadata.num_pending}")

    async def ack(self) -> None:
        self.answers.append("ack")
        if self._lose_ack:  # the process died before this ack left it
            self._consumer.lost_acks.append(self.seq)
        else:
            self._consumer.ack(self.seq)

    async def nak(self, delay: float | None = None) -> None:
        self.answers.append("nak")
        self._consumer.naks.append((self.seq, delay))

    async def in_progress(self) -> None:
        self._consumer.in_progress.append(self.seq)


@dataclass
class FakeConsumer:
    """A durable consumer over stream sequences 1..N: new messages in order, and messages
    delivered but never acknowledged handed out again before any new one. Acks follow the
    consumer's ack policy (the one the runner configures): explicit, or all up to the sequence."""

    events: list[Event[Any]]
    ack_policy: AckPolicy
    acked: set[int] = field(default_factory=set)
    deliveries: Counter[int] = field(default_factory=Counter)
    naks: list[tuple[int, float | None]] = field(default_factory=list)
    lost_acks: list[int] = field(default_factory=list)
    in_progress: list[int] = field(default_factory=list)
    next_new: int = 1

    @property
    def done(self) -> bool:
        return self.next_new > len(self.events) and not self.unacked()

    def ack(self, seq: int) -> None:
        if self.ack_policy == AckPolicy.ALL:
            self.acked.update(s for s in range(1, seq + 1) if self.deliveries[s])
        else:
            self.acked.add(seq)

    def unacked(self) -> list[int]:
        return [s for s in range(1, self.next_new) if s not in self.acked]

    def take(self, size: int) -> list[int]:
        seqs = self.unacked()[:size]
        while len(seqs) < size and self.next_new <= len(self.events):
            seqs.append(self.next_new)
            self.next_new += 1
        return seqs

    def messages(self, seqs: Sequence[int], *, lose_acks: bool = False) -> list[FakeMsg]:
        return [FakeMsg(self, s, lose_ack=lose_acks) for s in seqs]


# ---------------------------------------------------------------------------- harness


class ProcessDied(BaseException):
    """The process is killed in the middle of a batch: nothing after this point runs."""


class CrashableTally(TallyProjection):
    """The tally, with a kill switch that fires inside the batch transaction after its writes."""

    crash_next = False

    async def apply_batch(self, cur: Any, batch: Any, ctx: Any) -> None:
        await super().apply_batch(cur, batch, ctx)
        if self.crash_next:
            self.crash_next = False
            raise ProcessDied


@contextlib.asynccontextmanager
async def tally_view(pool: Any) -> AsyncIterator[tuple[TallyProjection, str]]:
    """A fresh TallyProjection schema for one example, dropped afterwards."""
    projection, tenant = await new_tally(pool)
    try:
        yield projection, tenant
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS {projection.schema} CASCADE")
            await conn.commit()


async def db_checkpoint(pool: Any, projection: TallyProjection) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT last_seq FROM {checkpoint_table(projection.schema)} WHERE projection = %s",
            (projection.name,),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def acquire(runner: ProjectionRunner, within: float = 10.0) -> None:
    """Take the advisory lock, as `run()` does: a dead session's lock goes away shortly after its
    connection closes (the server notices asynchronously), so poll for it."""
    deadline = asyncio.get_running_loop().time() + within
    while not await runner._acquire_leadership():
        assert asyncio.get_running_loop().time() < deadline, "advisory lock still held"
        await asyncio.sleep(0.01)


def rows_for(events: Sequence[Event[Any]]) -> list[tuple[str, int, str]]:
    """The `seen` rows of events published as stream sequences 1..N."""
    return [(e.event_id, seq, e.user_id) for seq, e in enumerate(events, start=1)]


async def snapshot(pool: Any, projection: TallyProjection) -> tuple[Any, ...]:
    return (
        await read_counts(pool, projection.schema),
        await read_seen(pool, projection.schema),
        await db_checkpoint(pool, projection),
    )


class Harness:
    """Drives runners over a FakeConsumer and checks the view after every batch."""

    def __init__(self, projection: TallyProjection, nc: Any, pool: Any,
                 events: list[Event[Any]]):
        self.projection = projection
        tenant = events[0].tenant_id
        self.crashable = CrashableTally(projection.schema, tenant)
        assert self.crashable.name == projection.name
        self.nc = nc
        self.pool = pool
        self.events = events
        policy = ProjectionRunner(projection, nc, pool)._consumer_config(1).ack_policy
        self.consumer = FakeConsumer(events, policy)
        self.runners: list[ProjectionRunner] = []
        self.outcomes: list[BatchOutcome] = []
        self.last_batch: list[int] = []
        self.high_water = 0

    @property
    def runner(self) -> ProjectionRunner:
        return self.runners[-1]

    async def start_runner(self) -> ProjectionRunner:
        """A new runner process: takes the lock, fences older runners, loads the checkpoint."""
        runner = ProjectionRunner(self.crashable, self.nc, self.pool, config=FAST)
        await acquire(runner)
        checkpoint = await runner.claim_checkpoint()
        assert checkpoint == self.high_water  # a claim never moves the checkpoint
        self.runners.append(runner)
        return runner

    async def crash(self) -> None:
        """The runner's process dies: its Postgres sessions end, the runner object is gone."""
        await self.runner._release_lock()
        await self.start_runner()

    async def deliver(self, seqs: Sequence[int], *, lose_acks: bool = False) -> BatchOutcome:
        self.last_batch = list(seqs)
        outcome = await self.runner.handle_batch(self.consumer.messages(seqs,
                                                                         lose_acks=lose_acks))
        self.outcomes.append(outcome)
        await self.check_prefix()
        return outcome

    async def check_prefix(self) -> None:
        """After any batch: the view is exactly the fold of the events up to the checkpoint."""
        counts, seen, checkpoint = await snapshot(self.pool, self.projection)
        assert checkpoint == self.runner._checkpoint
        assert checkpoint >= self.high_water, "checkpoint went backwards"
        self.high_water = checkpoint
        prefix = self.events[:checkpoint]
        assert counts == fold(prefix)
        assert seen == rows_for(prefix)

    async def crash_mid_apply(self, seqs: Sequence[int]) -> None:
        """The process dies inside the batch transaction, after the view writes."""
        self.crashable.crash_next = True
        with pytest.raises(ProcessDied):
            await self.runner.handle_batch(self.consumer.messages(seqs))
        self.crashable.crash_next = False
        await self.crash()
        await self.check_prefix()

    async def drain(self, batch: int = 7) -> None:
        for _ in range(4 * len(self.events) + 20):
            if self.consumer.done:
                return
            await self.deliver(self.consumer.take(batch))
        raise AssertionError(f"never drained; unacked={self.consumer.unacked()}")

    async def close(self) -> None:
        for runner in self.runners:
            await runner._release_lock()


# ---------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Fetch:
    size: int
    lose_acks: bool  # committed, but the acks never reach the server
    stale: int  # how many already-acked messages are delivered again with the batch
    crash_after: bool  # the process dies right after the batch (after commit, maybe before acks)


@dataclass(frozen=True)
class CrashBeforeCommit:
    size: int  # messages handed to a process that dies before it commits them


@dataclass(frozen=True)
class CrashMidApply:
    size: int  # the process dies inside the batch transaction, after the view writes


@dataclass(frozen=True)
class RedeliverLast:
    pass


@dataclass(frozen=True)
class Crash:
    pass


ACTIONS = st.one_of(
    st.builds(Fetch, size=st.integers(1, 12), lose_acks=st.booleans(),
              stale=st.integers(0, 3), crash_after=st.booleans()),
    st.builds(CrashBeforeCommit, size=st.integers(1, 12)),
    st.builds(CrashMidApply, size=st.integers(1, 12)),
    st.just(RedeliverLast()),
    st.just(Crash()),
)


def draw_events(data: st.DataObject, tenant: str, max_size: int) -> list[Event[Any]]:
    users = data.draw(st.lists(st.sampled_from(USERS), min_size=1, max_size=max_size),
                      label="users")
    return [turn(tenant, u) for u in users]


def draw_batches(data: st.DataObject, seqs: Sequence[int], label: str) -> list[list[int]]:
    """Split consecutive sequences into random consecutive batches."""
    batches: list[list[int]] = []
    rest = list(seqs)
    while rest:
        size = data.draw(st.integers(1, max(1, min(12, len(rest)))), label=label)
        batches.append(rest[:size])
        rest = rest[size:]
    return batches


# ---------------------------------------------------------------------------- properties


@PROPERTY_SETTINGS
@given(data=st.data())
async def test_crashes_and_redeliveries_anywhere_equal_the_fold(
    nc: Any, pool: Any, data: st.DataObject
) -> None:
    async with tally_view(pool) as (projection, tenant):
        events = draw_events(data, tenant, max_size=60)
        h = Harness(projection, nc, pool, events)
        try:
            await h.start_runner()
            for _ in range(data.draw(st.integers(0, 25), label="steps")):
                if h.consumer.done:
                    break
                action = data.draw(ACTIONS, label="action")
                if isinstance(action, Fetch):
                    seqs = h.consumer.take(action.size)
                    acked = sorted(h.consumer.acked)
                    if action.stale and acked:
                        seqs += data.draw(st.lists(st.sampled_from(acked), max_size=action.stale,
                                                   unique=True), label="stale")
                    if seqs:
                        await h.deliver(seqs, lose_acks=action.lose_acks)
                    if action.crash_after:
                        await h.crash()
                elif isinstance(action, CrashBeforeCommit):
                    h.consumer.messages(h.consumer.take(action.size))  # delivered to the dead
                    await h.crash()
                elif isinstance(action, CrashMidApply):
                    seqs = h.consumer.take(action.size)
                    if seqs and max(seqs) > h.high_water:  # the batch reaches the transaction
                        await h.crash_mid_apply(seqs)
                    elif seqs:
                        await h.deliver(seqs)
                elif isinstance(action, RedeliverLast):
                    if h.last_batch:
                        await h.deliver(h.last_batch)
                else:
                    await h.crash()
            await h.drain()

            counts, seen, checkpoint = await snapshot(pool, projection)
            assert counts == fold(events)
            assert seen == rows_for(events)  # each distinct event exactly once
            assert checkpoint == len(events) == max(h.consumer.deliveries)
            # Exactly-once applies: nothing re-applied, returned, retried or dead-lettered.
            assert sum(o.applied for o in h.outcomes) == len(events)
            assert not any(o.returned or o.dead_lettered or o.errors for o in h.outcomes)
            assert h.consumer.naks == []
            assert h.consumer.acked == set(range(1, len(events) + 1))
        finally:
            await h.close()


@PROPERTY_SETTINGS
@given(data=st.data())
async def test_a_prefix_applied_twice_equals_once_and_rebuild_equals_incremental(
    nc: Any, pool: Any, data: st.DataObject
) -> None:
    async with tally_view(pool) as (projection, tenant):
        events = draw_events(data, tenant, max_size=40)
        n = len(events)
        k = data.draw(st.integers(0, n), label="prefix")
        h = Harness(projection, nc, pool, events)
        try:
            await h.start_runner()
            for batch in draw_batches(data, range(1, k + 1), "first pass"):
                await h.deliver(batch)
            once = await snapshot(pool, projection)

            # The same prefix again: to the same runner, then to a newly started one (e.g. a
            # consumer restored from an older state); both pass over it without a change.
            for restart in (False, True):
                if restart:
                    await h.crash()
                for batch in draw_batches(data, range(1, k + 1), "again"):
                    outcome = await h.deliver(batch)
                    assert (outcome.applied, outcome.skipped) == (0, len(batch))
                assert await snapshot(pool, projection) == once

            for batch in draw_batches(data, range(k + 1, n + 1), "rest"):
                await h.deliver(batch)
            incremental = await snapshot(pool, projection)
            assert incremental == (fold(events), rows_for(events), n)

            # Rebuild from zero: reset, then a new runner is fed everything from sequence 1.
            await h.runner._release_lock()
            await reset_projection(projection, pool)
            rebuild = Harness(projection, nc, pool, events)
            try:
                assert (await snapshot(pool, projection)) == ({}, [], 0)
                await rebuild.start_runner()
                for batch in draw_batches(data, range(1, n + 1), "rebuild"):
                    await rebuild.deliver(batch)
                assert await snapshot(pool, projection) == incremental
            finally:
                await rebuild.close()
        finally:
            await h.close()


@PROPERTY_SETTINGS
@given(data=st.data(), fence_by=st.sampled_from(["claim", "reset"]))
async def test_a_stale_runner_cannot_change_the_view(
    nc: Any, pool: Any, data: st.DataObject, fence_by: str
) -> None:
    async with tally_view(pool) as (projection, tenant):
        events = draw_events(data, tenant, max_size=30)
        n = len(events)
        k = data.draw(st.integers(0, n - 1), label="applied by the old runner")
        h = Harness(projection, nc, pool, events)
        try:
            old = await h.start_runner()
            for batch in draw_batches(data, range(1, k + 1), "old runner"):
                await h.deliver(batch)

            # The old runner loses its lock but has not noticed yet (its next lock check would
            # still pass: the epoch is all that stops it), and the projection is claimed again:
            # by a new runner, or by a replay's reset.
            await old._release_lock()

            async def still_believes_it_leads() -> None:
                return None

            old._check_lock = still_believes_it_leads  # type: ignore[method-assign]
            if fence_by == "claim":
                new = ProjectionRunner(projection, nc, pool, config=FAST)
                h.runners.append(new)
                await acquire(new)
                await new.claim_checkpoint()
                j = data.draw(st.integers(k, n - 1), label="applied by the new runner")
                for batch in draw_batches(data, range(k + 1, j + 1), "new runner"):
                    await new.handle_batch(h.consumer.messages(batch))
            else:
                await reset_projection(projection, pool)
            before = await snapshot(pool, projection)

            # The old runner gets a batch with at least one event past its checkpoint. Its commit
            # is refused: it raises Fenced, or (when the apply itself fails first, e.g. on a row
            # the new owner wrote) it rewinds; either way nothing is acknowledged.
            seqs = data.draw(st.lists(st.integers(1, n), min_size=1, max_size=12, unique=True)
                             .filter(lambda s: max(s) > k), label="stale runner's batch")
            msgs = h.consumer.messages(seqs)
            with pytest.raises((Fenced, Rewind)):
                await old.handle_batch(msgs)

            assert await snapshot(pool, projection) == before
            assert old._checkpoint == k
            assert [m.answers for m in msgs] == [[]] * len(msgs)  # nothing acknowledged

            # The rightful owner (a new runner after a reset) still finishes to the fold.
            if fence_by == "reset":
                h.high_water = 0
                await h.start_runner()
            else:
                h.high_water = await db_checkpoint(pool, projection)
            for batch in draw_batches(data, range(h.high_water + 1, n + 1), "owner"):
                await h.deliver(batch)
            assert await snapshot(pool, projection) == (fold(events), rows_for(events), n)
        finally:
            await h.close()
