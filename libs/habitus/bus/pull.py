"""Batch pulls from a durable JetStream consumer, cheaply.

nats-py's `PullSubscription.fetch` waits for each message with its own task and timeout, which
costs more CPU per message than applying the event to Postgres does. This puller keeps one
subscription on a private inbox, sends one pull request per batch, and collects deliveries in a
callback: a batch costs one request and one wake-up instead of one task per message.

Deliveries are buffered in arrival order (stream order for a consumer with one puller), including
those answering an earlier request that was still open, so nothing delivered is ever dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError

STATUS = "Status"
#: No messages (no_wait), request expired, request conflict (e.g. max_waiting exceeded).
_END_OF_REQUEST = frozenset({"404", "408", "409"})
_HEARTBEAT = "100"
#: batches handed out at most this far apart belong to one flow of events (`linger_seconds`)
FLOW_GAP = 0.25
#: how long a flow must have lasted before its batches linger: a burst (a test's, a client's
#: one request) passes through as before; a steady stream, a load, is batched
SUSTAINED = 2.0
#: how long a steady flow may pause and still be the same flow when it resumes: under load the
#: gateway's backpressure answers 429 and its clients wait out a Retry-After of a second or
#: two, and a flow that had to last `SUSTAINED` again after each pause hardly ever lingered
#: (batches of about 40 events under `make load` at the 2 s bound, against about 120 without
#: the pauses). A flow that had not lasted `SUSTAINED` before its pause gains nothing by it.
PAUSE = 3.0
#: how long a batch waits, at most, for deliveries the stream said were still to come: a
#: backlog read in full batches pays a batch's fixed part (a transaction, the checkpoint, the
#: ack) once per `batch` events rather than once per the few hundred a fixed pause gathered
BURST = 0.05


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the runner needs from a JetStream ack subject."""

    stream_seq: int
    num_delivered: int
    num_pending: int
    consumer_seq: int
    #: when the stream stored the message (epoch seconds): a property of the stored message,
    #: so the same on every redelivery and replay (a fold may use it; never the wall clock)
    stored_at: float = 0.0


def delivery_info(msg: Msg) -> Delivery:
    """Parse `$JS.ACK.[<domain>.<account>.]<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.
    <pending>[.<token>]` directly: nats-py's `msg.metadata` builds several objects per call and
    cost more than decoding the event."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9:
        offset = 4
    elif len(tokens) >= 11:
        offset = 6
    else:
        md = msg.metadata
        return Delivery(md.sequence.stream, md.num_delivered, md.num_pending or 0,
                        md.sequence.consumer, md.timestamp.timestamp() if md.timestamp else 0.0)
    return Delivery(int(tokens[offset + 1]), int(tokens[offset]), int(tokens[offset + 4]),
                    int(tokens[offset + 2]), int(tokens[offset + 3]) / 1e9)


def _pending(msg: Msg) -> int:
    """How many more messages the stream held for the consumer when `msg` was delivered."""
    try:
        return delivery_info(msg).num_pending
    except Exception:  # not a JetStream delivery: assume a burst, as for one
        return 1


class BatchPuller:
    def __init__(self, nc: Client, stream: str, durable: str, *, burst_seconds: float = BURST,
                 linger_seconds: float = 0.0, sustained_seconds: float = SUSTAINED,
                 pause_seconds: float = PAUSE):
        self._nc = nc
        self._api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        #: how long a batch waits, at most, for the rest of a burst already on its way
        self._burst = burst_seconds
        #: once events flow steadily, how long a batch that is not full waits for more
        self._linger = linger_seconds
        self._sustained = sustained_seconds
        self._pause = pause_seconds
        #: when (monotonic) the current flow began, and when its last batch was handed out
        self._flow_since = self._last_out = -math.inf
        #: whether the flow had lasted `sustained` when its last batch was handed out
        self._steady = False
        self._buffer: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._sub: Subscription | None = None
        self._prefix = ""
        self._request_id = 0
        # request id -> messages still to come for it, oldest first; absent once it ended
        self._open: dict[str, int] = {}
        # request id -> when it surely ended (its expiry plus a grace): a status message lost
        # in a reconnect or a server restart must not leave a request "open" forever
        self._deadlines: dict[str, float] = {}

    async def start(self) -> None:
        self._prefix = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(f"{self._prefix}.*", cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        status = msg.headers.get(STATUS) if msg.headers else None
        if status is not None and not msg.data:
            # Status messages come on the request's own inbox; deliveries carry the stream
            # subject, so they are counted against the oldest open request (the server serves
            # waiting requests first in, first out).
            request = msg.subject.rsplit(".", 1)[-1]
            if status == _HEARTBEAT:
                return
            if status in _END_OF_REQUEST:
                self._end(request)
                self._arrived.set()  # wake the waiter: this request will bring nothing more
            return
        self._buffer.append(msg)
        if self._open:
            oldest = next(iter(self._open))
            if self._open[oldest] <= 1:
                self._end(oldest)
            else:
                self._open[oldest] -= 1
        self._arrived.set()

    def _end(self, request: str) -> None:
        self._open.pop(request, None)
        self._deadlines.pop(request, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for request in [r for r, deadline in self._deadlines.items() if deadline < now]:
            self._end(request)

    async def _request(self, batch: int, expires: float) -> None:
        self._request_id += 1
        rid = str(self._request_id)
        self._open[rid] = batch
        self._deadlines[rid] = time.monotonic() + expires + 1.0
        body = {"batch": batch, "expires": int(expires * 1e9)}
        await self._nc.publish(self._api, json.dumps(body).encode(), reply=f"{self._prefix}.{rid}")

    def _take(self, batch: int) -> list[Msg]:
        out: list[Msg] = []
        while self._buffer and len(out) < batch:
            out.append(self._buffer.popleft())
        return out

    def _outstanding(self) -> int:
        return sum(self._open.values())

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to `batch` messages; raises nats' TimeoutError if none arrived within `timeout`."""
        if self._sub is None:
            raise RuntimeError("BatchPuller.start() first")
        deadline = time.monotonic() + timeout
        self._expire()
        if len(self._buffer) < batch and self._outstanding() < batch:
            await self._request(batch - len(self._buffer), timeout)
        while not self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NatsTimeoutError
            self._arrived.clear()
            self._expire()
            if not self._open:
                await self._request(batch, left)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
        now = time.monotonic()
        gap = now - self._last_out
        if gap > FLOW_GAP and not (self._steady and gap <= self._pause):
            self._flow_since = now  # the first batch of a new flow
        self._steady = now - self._flow_since >= self._sustained
        if len(self._buffer) < batch:
            if self._linger and self._steady:
                # Events have flowed steadily for a while (batches back to back): wait a little
                # for the batch to fill. Each batch costs its fixed part (a transaction, the
                # checkpoint, the ack) whatever it holds, and a runner that keeps up would
                # otherwise take a steady stream a few events at a time.
                await self._fill(batch, min(self._linger, deadline - now))
            elif self._open and (pending := _pending(self._buffer[-1])):
                # The first deliveries of a burst are here, and the last one says how many more
                # the stream holds: wait for those the open request brings (they are on their
                # way), up to a full batch, for at most `burst_seconds`. A delivery that says
                # nothing more is pending is handed out at once: a lone command's event must not
                # wait for a burst that is not coming.
                await self._fill(min(batch, len(self._buffer) + pending),
                                 min(self._burst, deadline - now))
        self._last_out = time.monotonic()
        return self._take(batch)

    async def _fill(self, batch: int, seconds: float) -> None:
        """Wait until `batch` messages are buffered or `seconds` passed, on the requests `fetch`
        made (no new one: once they ended, nothing more is coming for this batch)."""
        until = time.monotonic() + seconds
        while (len(self._buffer) < batch and self._open
               and (left := until - time.monotonic()) > 0):
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    def drain_buffer(self) -> list[Msg]:
        """Deliveries received but not handed out; the caller discards them (its next claim
        starts again from the checkpoint)."""
        out = list(self._buffer)
        self._buffer.clear()
        return out

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._open.clear()
        self._deadlines.clear()

    def __repr__(self) -> str:
        return f"BatchPuller({self._api!r}, buffered={len(self._buffer)})"

