"""Reading a request body: under a size limit, within a time limit, gzip decoded.

Why each limit:

- **Size**: refused as soon as it is known to be over (the declared length, else the bytes so
  far), and for a gzip body the decoded size counts, decoded incrementally, so a small bomb
  cannot expand past the limit in memory.
- **Time**: a client sending one byte a second holds a connection, a task and a buffer for as
  long as it likes; 200 of them held the gateway's workers for a minute. A body must arrive
  whole within `timeout` seconds (408 otherwise), and a body still arriving after `slow_after`
  seconds counts as slow: at most `max_slow` are let go on at once, the one past that is
  refused at once (408), so slow clients cannot take every connection the fast ones need.
"""

from __future__ import annotations

import asyncio
import zlib

from fastapi import Request
from starlette.requests import ClientDisconnect

from services.gateway.errors import GatewayError

#: the encodings a body may declare; anything else is 415 with this list
ENCODINGS = ("gzip", "identity")


class BodyTooLarge(Exception):
    """The body (decoded, for gzip) is over the limit; args[0] is the size known so far."""


class BodyReader:
    """The limits of one gateway process, and the slow bodies it is letting go on."""

    def __init__(self, limit: int, *, timeout: float = 30.0, slow_after: float = 2.0,
                 max_slow: int = 64) -> None:
        self.limit = limit
        self.timeout = timeout
        self.slow_after = slow_after
        self.max_slow = max_slow
        #: bodies past `slow_after` and still arriving, now
        self.slow = 0

    async def read(self, request: Request, limit: int | None = None) -> bytes:
        """The whole body, decoded. Raises BodyTooLarge, or GatewayError: 408 (too slow),
        415 (an encoding not offered), 400 (gzip that does not decode)."""
        limit = self.limit if limit is None else limit
        encoding = _encoding(request)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(int(declared))
        raw = await self._receive(request, limit)
        return raw if encoding == "identity" else _gunzip(raw, limit)

    async def _receive(self, request: Request, limit: int) -> bytes:
        """The ASGI messages of the body, each awaited in the request's own task.

        Two timers watch the read instead of a task and a timed wait per message: a body
        nearly always arrives with its headers, and every extra task and wait costs an event
        loop turn on the read every agent turn makes. At `slow_after` the body counts as slow
        (or is refused, when `max_slow` are already under way); at `timeout` it is refused.
        Only a refusal cancels the read, and the answer then closes the connection, so a
        stream ended early is never read on."""
        loop = asyncio.get_running_loop()
        watch = _SlowWatch(self)
        received: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                marking = loop.call_later(self.slow_after, watch.mark, deadline)
                try:
                    while True:
                        message = await request.receive()
                        if message["type"] == "http.disconnect":
                            raise ClientDisconnect()
                        chunk = message.get("body", b"")
                        size += len(chunk)
                        if size > limit:
                            raise BodyTooLarge(size)
                        received.append(chunk)
                        if not message.get("more_body", False):
                            break
                finally:
                    marking.cancel()
        except TimeoutError:
            raise _too_slow(watch.refusal or f"not received whole within {self.timeout:g}s"
                            ) from None
        finally:
            watch.done()
        return b"".join(received)


class _SlowWatch:
    """One body's standing among the slow ones: counted once it is still arriving at
    `slow_after`, or refused then (its deadline moved to now) when the cap is reached."""

    def __init__(self, reader: BodyReader) -> None:
        self.reader = reader
        self.counted = False
        self.refusal: str | None = None

    def mark(self, deadline: asyncio.Timeout) -> None:
        reader = self.reader
        if reader.slow >= reader.max_slow:
            self.refusal = (f"{reader.max_slow} slow uploads are already under way; "
                            "send the body at once")
            deadline.reschedule(asyncio.get_running_loop().time())
            return
        reader.slow += 1
        self.counted = True

    def done(self) -> None:
        if self.counted:
            self.reader.slow -= 1
            self.counted = False


def _too_slow(reason: str) -> GatewayError:
    return GatewayError("request_timeout", f"body: {reason}", 408,
                        headers={"Connection": "close"})


def _encoding(request: Request) -> str:
    declared = request.headers.get("content-encoding", "").strip().lower() or "identity"
    if declared in ENCODINGS:
        return declared
    raise GatewayError("unsupported_media_type",
                       f"Content-Encoding: {declared!r} is not supported; send the body as "
                       + " or ".join(ENCODINGS), 415)


def _gunzip(raw: bytes, limit: int) -> bytes:
    """Decode gzip, never holding more than `limit` + 1 decoded bytes."""
    decoder = zlib.decompressobj(wbits=31)  # 16 + 15: a gzip header and trailer
    try:
        out = decoder.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise GatewayError("invalid_argument", f"body: not valid gzip ({exc})", 400) from None
    if len(out) > limit:
        raise BodyTooLarge(len(out))
    if not decoder.eof:
        raise GatewayError("invalid_argument", "body: the gzip stream ends early (truncated)",
                           400)
    if decoder.unused_data.strip():
        raise GatewayError("invalid_argument", "body: bytes after the gzip stream", 400)
    return out
