"""Publishing events with deduplication and a storage acknowledgement.

An event is only "published" once JetStream stored it (PubAck). The event id (scoped to its
tenant and user) is the `Nats-Msg-Id`, so a retry after a lost ack (or a client re-sending a
batch) is dropped by the stream and reported as a duplicate instead of stored twice.

A failure says whether the event may have been stored, because a caller answering a client
must not call an event "not stored" that later appears: `not_stored` (it never left this
process, or the server refused it), `not_confirmed` (it was sent but no ack came back: it may be
stored), `too_large` (the bus can never carry it). The connection does not buffer publishes
during a reconnect (`pending_size=0`, see `habitus.service.host`), and a publish is not retried
while disconnected: an outage fails fast instead of queueing events nobody waits for any more.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nats.aio.client import Client
from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    NoRespondersError,
    OutboundBufferLimitError,
)
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import APIError, NoStreamResponseError, TooManyStalledMsgsError

from habitus.bus.streams import stream_for
from habitus.crypto.sealing import sealable
from habitus.events import CATALOG, Catalog, Event
from habitus.events.catalog import TYPE_HEADER, VERSION_HEADER, warm_keys

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
#: async publishes in flight below which no stall can occur (nats-py's window is 4,000)
_ROOM = 3_500
TRANSIENT = (NatsTimeoutError, NoRespondersError, NoStreamResponseError, asyncio.TimeoutError)
#: Raised before anything was written to the connection.
NOT_SENT = (OutboundBufferLimitError, ConnectionClosedError, ConnectionDrainingError,
            TooManyStalledMsgsError)
FailureKind = Literal["not_stored", "not_confirmed", "too_large", "refused"]


class NotConfirmed(NatsTimeoutError):
    """The event was sent but no ack came back: it may be stored. Retrying with the same event
    id is safe (the stream deduplicates). A TimeoutError, so callers that retry timeouts do."""


@dataclass(frozen=True, slots=True)
class PublishResult:
    event_id: str
    stream: str
    seq: int
    duplicate: bool


def failure_kind(exc: BaseException) -> FailureKind:
    """What a publish failure means for the event (see the module docstring)."""
    if isinstance(exc, MaxPayloadError):
        return "too_large"
    if isinstance(exc, NotConfirmed | NatsTimeoutError | asyncio.TimeoutError):
        return "not_confirmed"
    if isinstance(exc, APIError) and not isinstance(exc, NoStreamResponseError):
        # The server answered and did not store it; 503 means JetStream is unavailable.
        return "not_stored" if (exc.code or 503) >= 500 else "refused"
    if isinstance(exc, (*NOT_SENT, NoRespondersError, NoStreamResponseError)):
        return "not_stored"
    return "refused"


def msg_id(event: Event[Any]) -> str:
    """The stream's deduplication key: the event id within its tenant and user, so an id one
    tenant chose (or derived) can never make another tenant's event a "duplicate"."""
    return f"{event.tenant_id}.{event.user_id}.{event.event_id}"


def headers_for(event: Event[Any]) -> dict[str, str]:
    return {
        MSG_ID: msg_id(event),
        TYPE_HEADER: event.type,
        VERSION_HEADER: str(event.schema_version),
    }


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, APIError) and not isinstance(exc, NoStreamResponseError):
        return failure_kind(exc) == "not_stored"
    return isinstance(exc, (*TRANSIENT, TooManyStalledMsgsError))


class EventPublisher:
    def __init__(
        self,
        js: JetStreamContext,
        catalog: Catalog = CATALOG,
        timeout: float = 5.0,
        attempts: int = 4,
        max_in_flight: int = 512,
        nc: Client | None = None,
    ):
        self._js = js
        self._nc: Client | None = nc if nc is not None else getattr(js, "_nc", None)
        self._catalog = catalog
        self._timeout = timeout
        self._attempts = attempts
        self._window = asyncio.Semaphore(max_in_flight)

    def _connected(self) -> bool:
        return self._nc is None or bool(self._nc.is_connected)

    async def publish(self, event: Event[Any], *, sent: bool = False) -> PublishResult:
        """Publish one event, retrying transient failures while connected. `sent` says an
        earlier copy already went out, so a final failure is `NotConfirmed`, never "not sent"."""
        subject = self._catalog.subject(event)
        stream = stream_for(self._catalog.spec(event.type).stream)
        body = self._catalog.encode(event)
        for attempt in range(1, self._attempts + 1):
            if not self._connected():
                exc: Exception = OutboundBufferLimitError()
            else:
                try:
                    async with self._window:
                        ack = await self._js.publish(
                            subject, body, timeout=self._timeout, stream=stream,
                            headers=headers_for(event),
                        )
                    return PublishResult(event.event_id, ack.stream, ack.seq, bool(ack.duplicate))
                except Exception as caught:
                    exc = caught
            sent = sent or failure_kind(exc) == "not_confirmed"
            if attempt == self._attempts or not _retryable(exc) or not self._connected():
                if sent and not isinstance(exc, NotConfirmed):
                    raise NotConfirmed(f"{event.event_id}: sent, no ack ({exc!r})") from exc
                raise exc
            await asyncio.sleep(min(2.0, 0.1 * 2 ** (attempt - 1)) * (0.5 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def publish_many(
        self, events: Sequence[Event[Any]]
    ) -> list[PublishResult | Exception]:
        """Publish a batch with many acks in flight; one outcome per event, in order.

        The batch goes out pipelined (async publish, one wait for all the acks); an event whose
        ack did not come back (or came back "unavailable") is retried on its own through
        `publish`, concurrently. A failure is returned in its slot rather than raised, so the
        caller can tell which events were stored (`failure_kind` says what a failure means);
        retrying any of them is safe because the event id deduplicates.
        """
        if not events:
            return []
        await warm_keys(self._catalog, {(e.tenant_id, e.user_id) for e in events
                                        if sealable(e.type, e.user_id)}, create=True)
        slots: list[asyncio.Future[PubAck] | Exception] = []
        for event in events:
            if not self._connected():
                # publish_async leaks its pending slot when the client refuses the publish,
                # so a disconnected client is not asked at all.
                slots.append(OutboundBufferLimitError())
                continue
            try:
                slots.append(await self._js.publish_async(
                    self._catalog.subject(event),
                    self._catalog.encode(event),
                    stream=stream_for(self._catalog.spec(event.type).stream),
                    headers=headers_for(event),
                    # A timeout makes nats-py wrap the wait for a window slot in a task
                    # (asyncio.wait_for before 3.12): per event, that cost as much as the
                    # publish. With room left in the window no wait can happen, so none is
                    # armed; near its end the bounded wait applies.
                    wait_stall=(None if self._js.publish_async_pending() < _ROOM
                                else self._timeout),
                ))
            except Exception as exc:  # raised before anything was written
                slots.append(exc)
        pending = [f for f in slots if isinstance(f, asyncio.Future)]
        if pending:
            await asyncio.wait(pending, timeout=self._timeout)
        results: list[PublishResult | Exception | None] = []
        retries: dict[int, asyncio.Task[PublishResult]] = {}
        for i, (event, slot) in enumerate(zip(events, slots, strict=True)):
            if isinstance(slot, Exception):
                results.append(slot)
                if _retryable(slot) and self._connected():
                    retries[i] = asyncio.ensure_future(self.publish(event))
                continue
            if slot.done() and not slot.cancelled() and slot.exception() is None:
                ack = slot.result()
                results.append(
                    PublishResult(event.event_id, ack.stream, ack.seq, bool(ack.duplicate))
                )
                continue
            error = slot.exception() if slot.done() and not slot.cancelled() else None
            if not slot.done():
                slot.cancel()
            sent = error is None  # no answer at all: it went out and may be stored
            failure: Exception = error if isinstance(error, Exception) else NotConfirmed(
                f"{event.event_id}: sent, no ack within {self._timeout}s")
            results.append(failure)
            if _retryable(failure) and self._connected():
                retries[i] = asyncio.ensure_future(self.publish(event, sent=sent))
        if retries:
            outcomes = await asyncio.gather(*retries.values(), return_exceptions=True)
            for i, outcome in zip(retries, outcomes, strict=True):
                if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                    raise outcome
                results[i] = outcome
        return [r if r is not None else RuntimeError("no outcome") for r in results]
