"""Publishing events with deduplication and a storage acknowledgement.

An event is only "published" once JetStream stored it (PubAck). The event id (scoped to its
tenant and user) is the `Nats-Msg-Id`, so a retry after a lost ack (or a client re-sending a
batch) is dropped by the stream and reported as a duplicate instead of stored twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from habitus.bus.streams import stream_for
from habitus.events import CATALOG, Catalog, Event
from habitus.events.catalog import TYPE_HEADER, VERSION_HEADER

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
TRANSIENT = (NatsTimeoutError, NoRespondersError, NoStreamResponseError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class PublishResult:
    event_id: str
    stream: str
    seq: int
    duplicate: bool


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


class EventPublisher:
    def __init__(
        self,
        js: JetStreamContext,
        catalog: Catalog = CATALOG,
        timeout: float = 5.0,
        attempts: int = 4,
        max_in_flight: int = 512,
    ):
        self._js = js
        self._catalog = catalog
        self._timeout = timeout
        self._attempts = attempts
        self._window = asyncio.Semaphore(max_in_flight)

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception_type(TRANSIENT),
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential_jitter(multiplier=0.1, max=2.0),
            reraise=True,
        )

    async def publish(self, event: Event[Any]) -> PublishResult:
        subject = self._catalog.subject(event)
        stream = stream_for(self._catalog.spec(event.type).stream)
        body = event.to_json()
        ack: PubAck | None = None
        async for attempt in self._retrying():
            with attempt:
                async with self._window:
                    ack = await self._js.publish(
                        subject,
                        body,
                        timeout=self._timeout,
                        stream=stream,
                        headers=headers_for(event),
                    )
        assert ack is not None
        return PublishResult(event.event_id, ack.stream, ack.seq, bool(ack.duplicate))

    async def publish_many(
        self, events: Sequence[Event[Any]]
    ) -> list[PublishResult | Exception]:
        """Publish a batch with many acks in flight; one outcome per event, in order.

        The batch goes out pipelined (async publish, one wait for all the acks); any event whose
        ack did not come back is retried on its own through `publish`. A failure is returned in
        its slot rather than raised, so the caller can tell which events were stored; retrying
        any of them is safe because the event id deduplicates.
        """
        if not events:
            return []
        futures: list[asyncio.Future[PubAck] | None] = []
        for event in events:
            try:
                futures.append(await self._js.publish_async(
                    self._catalog.subject(event),
                    event.to_json(),
                    stream=stream_for(self._catalog.spec(event.type).stream),
                    headers=headers_for(event),
                    wait_stall=self._timeout,
                ))
            except Exception:
                futures.append(None)  # retried below
        pending = [f for f in futures if f is not None]
        if pending:
            await asyncio.wait(pending, timeout=self._timeout)
        results: list[PublishResult | Exception] = []
        for event, future in zip(events, futures, strict=True):
            if future is not None and future.done() and not future.cancelled() \
                    and future.exception() is None:
                ack = future.result()
                results.append(
                    PublishResult(event.event_id, ack.stream, ack.seq, bool(ack.duplicate))
                )
                continue
            if future is not None and not future.done():
                future.cancel()
            try:
                results.append(await self.publish(event))
            except Exception as exc:
                results.append(exc)
        return results
