"""Leader election with a Postgres session advisory lock.

Whoever holds the lock's connection is the leader; if that connection dies (the process, the
network or Postgres), Postgres releases the lock and a standby takes over. Holders must call
`check()` before acting on their leadership, and fence their writes (see checkpoints' epoch),
because a lost connection is only noticed at the next round trip.
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from typing import Any

import psycopg

log = logging.getLogger(__name__)


class LostLeadership(Exception):
    pass


def lock_key(name: str) -> int:
    """A stable advisory lock key per name (positive, fits a bigint)."""
    return zlib.crc32(f"habitus.leader:{name}".encode()) & 0x7FFFFFFF


class LeaderLock:
    def __init__(self, conninfo: str, name: str):
        self._conninfo = conninfo
        self.name = name
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def try_acquire(self) -> bool:
        if self.held:
            return True
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(self.name),))
            row = await cur.fetchone()
        except Exception:
            await conn.close()
            raise
        if not row or not row[0]:
            await conn.close()
            return False
        self._conn = conn
        log.info("leadership acquired", extra={"lock": self.name})
        return True

    async def check(self) -> None:
        """Raise LostLeadership unless the lock's connection is still alive."""
        conn = self._conn
        if conn is None or conn.closed:
            raise LostLeadership(f"{self.name}: lock connection lost")
        try:
            await conn.execute("SELECT 1")
        except psycopg.Error as exc:
            await self.release()
            raise LostLeadership(f"{self.name}: lock connection lost ({exc})") from exc

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(Exception):
                await conn.close()
