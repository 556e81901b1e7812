"""Waking read-your-writes waiters when a checkpoint moves, instead of polling for it.

Every checkpoint commit (and reset) sends `NOTIFY habitus_checkpoint '<schema>|<projection>|<seq>'`
in its own transaction, so Postgres delivers it exactly when the new checkpoint is visible.
A `CheckpointWatcher` holds one autocommit connection per process doing `LISTEN` on that
channel, opened lazily by the first waiter, and wakes the waiters a notification concerns.

It never misses a change, and never hangs on a lost connection:

* A waiter registers *before* it reads the checkpoint, then waits. A notification that
  arrives between the read and the wait leaves the waiter's flag set, so the wait returns at
  once and the waiter reads again.
* Whenever the listener (re)connects, after its `LISTEN` is in place, it wakes every waiter: a
  commit may have happened while nobody was listening (before the first connection, or while
  Postgres restarted), and reading again after `LISTEN` closes that window.
* Waiters still re-read every `fallback_interval` seconds whatever happens, so a listener that is
  down (or silently cut off) degrades to slow polling. The listener reconnects with backoff and
  checks its connection with a round trip every `health_interval` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from habitus.projection.checkpoints import CHANNEL, parse_notification
from habitus.tasks import stop_task

log = logging.getLogger(__name__)


class Watch:
    """One waiter's registration: woken when the projection's checkpoint reaches `seq`."""

    def __init__(self, key: tuple[str, str], seq: int):
        self.key = key
        self.seq = seq
        self._woken = asyncio.Event()

    def wake(self) -> None:
        self._woken.set()

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a wake-up; True if woken (read again now)."""
        if not self._woken.is_set() and timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout)
        woken = self._woken.is_set()
        self._woken.clear()
        return woken


class CheckpointWatcher:
    """One LISTEN connection for the process; wakes `Watch`es on checkpoint notifications."""

    def __init__(self, conninfo: str, *, fallback_interval: float = 0.5,
                 reconnect_delay: float = 0.2, max_reconnect_delay: float = 5.0,
                 health_interval: float = 10.0):
        self.conninfo = conninfo
        #: the longest a waiter waits before reading the checkpoint again regardless
        self.fallback_interval = fallback_interval
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._health_interval = health_interval
        self._watches: dict[tuple[str, str], set[Watch]] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._listening = asyncio.Event()

    # ------------------------------------------------------------------ waiters

    @contextlib.contextmanager
    def watch(self, schema: str, projection: str, seq: int) -> Iterator[Watch]:
        """Register a waiter for `projection` reaching `seq`; read the checkpoint only after
        entering this (so no notification can slip between the read and the wait)."""
        self._ensure_started()
        entry = Watch((schema, projection), seq)
        self._watches.setdefault(entry.key, set()).add(entry)
        try:
            yield entry
        finally:
            waiting = self._watches.get(entry.key)
            if waiting is not None:
                waiting.discard(entry)
                if not waiting:
                    del self._watches[entry.key]

    def _dispatch(self, payload: str) -> None:
        parsed = parse_notification(payload)
        if parsed is None:
            return
        schema, projection, seq = parsed
        for entry in self._watches.get((schema, projection), ()):
            if seq >= entry.seq:
                entry.wake()

    def _wake_all(self) -> None:
        for waiting in self._watches.values():
            for entry in waiting:
                entry.wake()

    # ------------------------------------------------------------------ the listener

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def listener_pid(self) -> int | None:
        """The backend pid of the LISTEN connection, while it is connected."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def wait_listening(self, timeout: float = 5.0) -> bool:
        """Start the listener if needed; True once its LISTEN is in place (tests, warm-up)."""
        self._ensure_started()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout)
        return self._listening.is_set()

    def _ensure_started(self) -> None:
        if self._task is not None and not self._task.done():
            return
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._listen(), name="checkpoint-watcher")

    async def _listen(self) -> None:
        delay = self._reconnect_delay
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, connect_timeout=5,
                    application_name="habitus-checkpoint-watcher")
                await conn.execute(f"LISTEN {CHANNEL}")
                self._conn = conn
                self._listening.set()
                delay = self._reconnect_delay
                self._wake_all()  # commits while nobody listened: read again, now that we do
                while True:
                    async for note in conn.notifies(timeout=self._health_interval):
                        self._dispatch(note.payload)
                    await conn.execute("SELECT 1")  # a silently dead connection raises here
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("checkpoint listener lost; waiters poll until it is back",
                            extra={"error": repr(exc), "retry_in": delay})
            finally:
                self._listening.clear()
                self._conn = None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_reconnect_delay)

    async def close(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)


_DEFAULT: dict[str, CheckpointWatcher] = {}


def default_watcher(pool: AsyncConnectionPool) -> CheckpointWatcher:
    """The process's watcher for the database `pool` connects to (one per conninfo; a new one
    if the event loop changed, as a watcher's connection belongs to its loop)."""
    conninfo = str(pool.conninfo)
    watcher = _DEFAULT.get(conninfo)
    loop = asyncio.get_running_loop()
    if watcher is None or (watcher.loop is not None and watcher.loop is not loop):
        watcher = _DEFAULT[conninfo] = CheckpointWatcher(conninfo)
    return watcher


async def close_default_watchers() -> None:
    """Close the process's watchers (a service's shutdown)."""
    watchers = list(_DEFAULT.values())
    _DEFAULT.clear()
    loop = asyncio.get_running_loop()
    for watcher in watchers:
        if watcher.loop is None or watcher.loop is loop:
            await watcher.close()
