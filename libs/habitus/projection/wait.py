"""Read-your-writes for commands: wait until a projection has applied a given stream sequence.

An RPC that changes state publishes its event, then waits here before answering, so the caller's
next read sees the change. It reads the checkpoint row, so it works whichever replica applies.
A checkpoint also moves past an event that was dead-lettered; the dead-letter record beside it
tells the two apart, so a command never answers success for a change that was given up on.
"""

from __future__ import annotations

import asyncio
import time

from psycopg_pool import AsyncConnectionPool

from habitus.db.checkpoints import DeadLetterRecord, checkpoint_table, dead_letter_at


class NotAppliedYet(TimeoutError):
    pass


class DeadLettered(Exception):
    """The projection gave up on the event: it is in HABITUS_DLQ, with this reason."""

    def __init__(self, projection: str, record: DeadLetterRecord):
        self.projection = projection
        self.record = record
        super().__init__(f"{projection} could not apply it ({record.reason}): {record.detail}")


async def wait_applied(pool: AsyncConnectionPool, schema: str, projection: str, seq: int,
                       timeout: float = 10.0, *, unless_absent: bool = False) -> None:
    """Return once `projection` applied `seq`; raise DeadLettered if it gave up on it.

    `unless_absent`: return at once when the projection has no checkpoint row at all (its
    service was never run in this deployment, so nothing will ever apply the event there)."""
    table = checkpoint_table(schema)
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(f"SELECT last_seq FROM {table} WHERE projection = %s",
                                     (projection,))
            row = await cur.fetchone()
            if row is not None and int(row[0]) >= seq:
                dead = await dead_letter_at(conn, schema, projection, seq)
                if dead is not None:
                    raise DeadLettered(projection, dead)
                return
            if row is None and unless_absent:
                return
        if time.monotonic() > deadline:
            raise NotAppliedYet(f"{projection} has not applied sequence {seq} in {timeout}s")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
