"""Read-your-writes for commands: wait until a projection has applied a given stream sequence.

An RPC that changes state publishes its event, then waits here before answering, so the caller's
next read sees the change. It reads the checkpoint row, so it works whichever replica applies;
it is woken by the checkpoint's NOTIFY (`habitus.projection.watch`) rather than polling, and
falls back to a slow re-read if the listener is unavailable.
A checkpoint also moves past an event that was dead-lettered; the dead-letter record beside it
tells the two apart, so a command never answers success for a change that was given up on.
"""

from __future__ import annotations

import time

from psycopg_pool import AsyncConnectionPool

from habitus.projection.checkpoints import CheckpointStore, DeadLetterRecord
from habitus.projection.watch import CheckpointWatcher, default_watcher


class NotAppliedYet(TimeoutError):
    pass


class DeadLettered(Exception):
    """The projection gave up on the event: it is in HABITUS_DLQ, with this reason."""

    def __init__(self, projection: str, record: DeadLetterRecord):
        self.projection = projection
        self.record = record
        super().__init__(f"{projection} could not apply it ({record.reason}): {record.detail}")


async def wait_applied(pool: AsyncConnectionPool, schema: str, projection: str, seq: int,
                       timeout: float = 10.0, *, unless_absent: bool = False,
                       watcher: CheckpointWatcher | None = None, slot: int | None = None
                       ) -> bool:
    """Return True once `projection` applied `seq`; raise DeadLettered if it gave up on it.

    `slot`: the slot the event at `seq` is stored under (the user's or the tenant's, by the
    projection's `partition_by`): a partitioned projection has applied it once the partitions
    reading that slot are past it. None waits for every partition, which only an
    unpartitioned projection (or a caller that means "all of it") should do.

    `unless_absent`: return at once when the projection has no checkpoint row at all (its
    service was never run in this deployment, so nothing will ever apply the event there):
    then the answer is False.
    `watcher`: the listener to be woken by (default: the process's one for `pool`'s database).
    """
    store = CheckpointStore(schema)
    watcher = watcher or default_watcher(pool)
    deadline = time.monotonic() + timeout
    # Registered before the first read: a commit after that read wakes this waiter.
    with watcher.watch(schema, projection, seq) as change:
        while True:
            async with pool.connection() as conn:
                last_seq = await store.last_seq(conn, projection, slot)
                if last_seq is not None and last_seq >= seq:
                    dead = await store.dead_letter_at(conn, projection, seq)
                    if dead is not None:
                        raise DeadLettered(projection, dead)
                    return True
                if last_seq is None and unless_absent:
                    return False
            remaining = deadline - time.monotonic()
            if remaining < 0:
                raise NotAppliedYet(f"{projection} has not applied sequence {seq} in "
                                    f"{timeout}s{await _where(pool, store, projection, slot)}")
            await change.wait(min(remaining, watcher.fallback_interval))


async def _where(pool: AsyncConnectionPool, store: CheckpointStore, projection: str,
                 slot: int | None) -> str:
    """Where the partitions that would apply it stand (an operator's first question)."""
    try:
        async with pool.connection() as conn:
            rows = await store.layout(conn, projection)
            alive = set(await store.live_members(conn))
    except Exception:  # a diagnosis never hides the timeout
        return ""
    covering = [r for r in rows if slot is None or r.partition.covers(slot)]
    if not covering:
        return ""
    return " (" + "; ".join(
        f"partition {r.partition.label} {r.state} at {r.last_seq}, claimed by "
        f"{r.owner or 'nobody'}{'' if r.owner is None or r.owner in alive else ' (gone)'}"
        for r in covering) + ")"
