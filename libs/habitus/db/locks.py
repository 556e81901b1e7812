"""Named mutual exclusion across processes and replicas, with a Postgres advisory lock.

A transaction-scoped lock on a pooled connection of its own: it is released when the block
ends, or by Postgres when the process or its connection dies, so a crash never leaves a lock
behind. The name is hashed to the lock's 64-bit key; two names sharing a key only serialise
more than needed, never less.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool


@asynccontextmanager
async def held(pool: AsyncConnectionPool[Any], name: str) -> AsyncIterator[None]:
    """Wait for the lock called `name`, hold it for the block."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
        yield
