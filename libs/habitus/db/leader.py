"""Leader election with a Postgres session advisory lock.

Whoever holds the lock's connection is the leader; if that connection dies (the process, the
network or Postgres), Postgres releases the lock and a standby takes over. Holders must call
`check()` before acting on their leadership, and fence their writes (see checkpoints' epoch),
because a lost connection is only noticed at the next round trip.

`LeaderLock` holds one lock on a connection of its own; `LockSession` holds many on one
connection (a replica's share of many partitions), each taken through a `SessionLock`.
"""

from __future__ import annotations

import asyncio
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


class LockSession:
    """Many named advisory locks on one session: a replica holding a share of many
    partitions needs one connection for all their locks, not one each.

    The session is opened by the first lock taken; when it dies every lock on it is lost at
    once (Postgres releases them), which `check` reports for each. Statements on the one
    connection are serialised."""

    def __init__(self, conninfo: str, application_name: str = "habitus-locks"):
        self._conninfo = conninfo
        self._application_name = application_name
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._held: set[int] = set()
        self._guard: asyncio.Lock | None = None

    @property
    def alive(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def lock(self, name: str) -> SessionLock:
        return SessionLock(self, name)

    def holds(self, key: int) -> bool:
        return self.alive and key in self._held

    def _serialised(self) -> asyncio.Lock:
        if self._guard is None:
            self._guard = asyncio.Lock()
        return self._guard

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if not self.alive:
            self._held.clear()
            self._conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, application_name=self._application_name)
        assert self._conn is not None
        return self._conn

    async def try_acquire(self, key: int) -> bool:
        async with self._serialised():
            if self.holds(key):
                return True
            conn = await self._connection()
            try:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                row = await cur.fetchone()
            except psycopg.Error:
                await self._lose()
                raise
            if row and row[0]:
                self._held.add(key)
                return True
            return False

    async def check(self, key: int, name: str) -> None:
        async with self._serialised():
            if not self.holds(key):
                raise LostLeadership(f"{name}: lock not held")
            assert self._conn is not None
            try:
                await self._conn.execute("SELECT 1")
            except psycopg.Error as exc:
                await self._lose()
                raise LostLeadership(f"{name}: lock connection lost ({exc})") from exc

    async def release(self, key: int) -> None:
        async with self._serialised():
            if not self.holds(key):
                self._held.discard(key)
                return
            self._held.discard(key)
            assert self._conn is not None
            try:
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                await self._lose()

    async def _lose(self) -> None:
        conn, self._conn = self._conn, None
        self._held.clear()
        if conn is not None and not conn.closed:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        async with self._serialised():
            await self._lose()


class SessionLock:
    """One named lock of a `LockSession`, with `LeaderLock`'s interface."""

    def __init__(self, session: LockSession, name: str):
        self._session = session
        self.name = name
        self._key = lock_key(name)

    @property
    def held(self) -> bool:
        return self._session.holds(self._key)

    async def try_acquire(self) -> bool:
        acquired = await self._session.try_acquire(self._key)
        if acquired:
            log.info("leadership acquired", extra={"lock": self.name})
        return acquired

    async def check(self) -> None:
        await self._session.check(self._key, self.name)

    async def release(self) -> None:
        await self._session.release(self._key)
