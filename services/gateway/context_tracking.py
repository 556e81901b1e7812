"""Redis telling this gateway which cached contexts changed (server-assisted client tracking).

The gateway keeps the `prompt.context` entries it has read in memory
(services.gateway.local_contexts) and must stop serving one as soon as Redis holds anything newer
for its user. Redis's client tracking, in broadcast mode, does the telling: one connection per
gateway process speaks RESP3 and asks for every key modified under the context cache's prefix;
Redis pushes each such key's name on that connection from the event-loop turn of the write that
modified it. The pushes are parsed as they arrive (`data_received`, with hiredis), so a push
already in the socket when a request arrives is applied before the request is handled:
uvicorn starts a request's task from its `data_received`, and a task runs only after every I/O
callback of the loop turn that started it.

While the connection is down nothing can be known, so `live` is False and the memory is
emptied (`on_reset`); `epoch` changes on every connect and every loss, so an entry read under
one connection is never stored under the next.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any, cast

import hiredis
from redis.asyncio.connection import SSLConnection, parse_url

from services.gateway.metrics import CONTEXT_TRACKING_UP

log = logging.getLogger(__name__)

#: how long the handshake (HELLO, CLIENT TRACKING) may take before the connection is retried
SETUP_TIMEOUT = 5.0
#: reconnection waits: the first, then doubling up to the last
RETRY_FIRST, RETRY_MAX = 0.1, 5.0


def _command(*parts: str) -> bytes:
    # hiredis's stub types the command as a one-element tuple
    packed: bytes = hiredis.pack_command(cast(Any, parts))
    return packed


class _Pushes(asyncio.Protocol):
    """One tracking connection: the handshake's replies to `replies`, then every push to the
    feed, parsed in `data_received`."""

    def __init__(self, feed: TrackingFeed) -> None:
        self.feed = feed
        self.reader = hiredis.Reader()
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.pushes = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (message := self.reader.gets()) is not False:
            if self.pushes:
                self.feed.received(message)
            else:
                self.replies.put_nowait(message)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class TrackingFeed:
    """Keeps one tracking connection to Redis open, reconnecting after a loss, and hands the
    keys Redis says changed to `on_keys` (`on_reset`: forget everything; a flush of the
    database, or the connection lost)."""

    def __init__(self, url: str, prefix: str, on_keys: Callable[[list[str]], None],
                 on_reset: Callable[[], None]) -> None:
        self._target = parse_url(url)
        self._prefix = prefix
        self._on_keys = on_keys
        self._on_reset = on_reset
        self._task: asyncio.Task[None] | None = None
        self._protocol: _Pushes | None = None
        #: True while Redis is known to be telling this process about every change
        self.live = False
        #: changes whenever `live` does: an entry read under one epoch is stored under no other
        self.epoch = 0
        #: set once the first connection is live (tests and start-up wait on it)
        self.ready = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="context-tracking")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._down()

    def received(self, message: Any) -> None:
        """A push: `invalidate` with the keys modified, or with none when the database was
        flushed (everything is then forgotten)."""
        if not isinstance(message, list) or len(message) != 2 or message[0] != b"invalidate":
            return
        keys = message[1]
        if keys is None:
            self._on_reset()
            return
        self._on_keys([k.decode() if isinstance(k, bytes) else str(k) for k in keys])

    def drop_connection(self) -> None:
        """Close the connection as if it had been lost (for tests of the recovery)."""
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()

    async def _run(self) -> None:
        wait = RETRY_FIRST
        while True:
            try:
                protocol = await asyncio.wait_for(self._connect(), SETUP_TIMEOUT)
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.warning("context tracking unavailable; contexts are read from Redis",
                            extra={"error": repr(exc), "retry_in": wait})
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_MAX)
                continue
            wait = RETRY_FIRST
            self._protocol = protocol
            self.epoch += 1
            self.live = True
            CONTEXT_TRACKING_UP.set(1)
            self.ready.set()
            try:
                await protocol.closed
            finally:
                if protocol.transport is not None:
                    protocol.transport.close()
                self._protocol = None
                self._down()
            log.warning("context tracking connection lost; reconnecting")

    def _down(self) -> None:
        if self.live:
            self.live = False
            self.epoch += 1
            CONTEXT_TRACKING_UP.set(0)
        self._on_reset()

    async def _connect(self) -> _Pushes:
        loop = asyncio.get_running_loop()
        t = self._target
        protocol: _Pushes | None = None

        def make() -> _Pushes:
            nonlocal protocol
            protocol = _Pushes(self)
            return protocol

        if "path" in t:
            await loop.create_unix_connection(make, t["path"])
        else:
            tls = ssl.create_default_context() if t.get("connection_class") is SSLConnection \
                else None
            await loop.create_connection(make, t.get("host", "localhost"), t.get("port", 6379),
                                         ssl=tls)
        assert protocol is not None and protocol.transport is not None
        try:
            hello: list[Any] = ["HELLO", "3"]
            if t.get("password"):
                hello += ["AUTH", t.get("username") or "default", t["password"]]
            hello += ["SETNAME", "habitus-gateway-context-tracking"]
            protocol.transport.write(_command(*hello))
            protocol.transport.write(_command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX",
                                              self._prefix))
            for _ in range(2):
                reply = await protocol.replies.get()
                if isinstance(reply, hiredis.ReplyError):
                    raise ConnectionError(f"Redis refused context tracking: {reply}")
            protocol.pushes = True
            # anything that came with the handshake's replies is a push already
            while not protocol.replies.empty():
                self.received(protocol.replies.get_nowait())
        except BaseException:
            protocol.transport.close()
            raise
        return protocol
