"""What went wrong, and what the runner does about it.

The runner never drops an event because of a fault that is not the event's own. Every
exception is sorted into one of three kinds:

* **Transient** (`is_transient`): Postgres, NATS or a worker process of the projection's own
  (`DependencyUnavailable`) is briefly unavailable. Retried at once with backoff; if it
  persists, the runner pauses and starts again from its checkpoint (a `Rewind`). Nothing is
  dropped or counted as poison.
* **Possibly the event's fault** (`is_about_the_event`): data and integrity errors and the
  projection's own exceptions. Repeated `max_deliver` times, the event is poison and goes to the
  DLQ; `is_permanent` ones (data the database can never store, an invalid event) go at once.
* **The system's fault**: anything else from the database or the bus (a read-only failover, a
  missing table, a full stream). Counting it would dead-letter healthy events during an outage,
  so it rewinds without counting an attempt.

Two control-flow exceptions complete the picture: `Fenced` (someone claimed the projection
since this runner did; it must claim again before writing) and `Rewind` (start again from the
checkpoint after a delay).
"""

from __future__ import annotations

import asyncio

import psycopg
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import Error as NatsJsError
from psycopg_pool import PoolTimeout
from pydantic import ValidationError

from habitus.events import EventValidationError

TRANSIENT_DB = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
# OutboundBufferLimitError: publishing while disconnected (connections buffer nothing, so a
# publish during a reconnect fails at once instead of going out after its caller gave up).
TRANSIENT_BUS = (NatsTimeoutError, NoRespondersError, ConnectionClosedError,
                 OutboundBufferLimitError, asyncio.TimeoutError)


class DependencyUnavailable(Exception):
    """A part a projection needs besides Postgres and NATS (a worker process of its own) is
    briefly unavailable: retried and rewound like an outage of the database, never counted
    against the event being applied."""


def is_transient(exc: BaseException) -> bool:
    """Worth retrying at once: the database, the bus or a worker of the projection's own is
    briefly unavailable."""
    return isinstance(exc, (*TRANSIENT_DB, *TRANSIENT_BUS, DependencyUnavailable))


def is_about_the_event(exc: BaseException) -> bool:
    """Could this failure be the event's fault (and so, repeated, make it poison)?

    Data and integrity errors and the projection's own exceptions can be; anything else from
    the database (a read-only failover, a missing table) or the bus (a full stream, no JetStream
    leader) is the system's, and counting it would dead-letter healthy events during an outage.
    """
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return True
    return not isinstance(exc, psycopg.Error | NatsError | NatsJsError | DependencyUnavailable)


def is_permanent(exc: BaseException) -> bool:
    """Can never succeed however often it is retried: the event carries data the database
    cannot store (a NUL byte, a number out of range, ...) or that builds no valid consequence.
    Such an event is dead-lettered at once instead of after `max_deliver` paced attempts."""
    return isinstance(exc, psycopg.DataError | EventValidationError | ValidationError
                      | UnicodeError)


class Fenced(Exception):
    """Another runner (or a replay) claimed the projection since this one started."""


class Rewind(Exception):
    """Events of this batch were not applied: start again from the checkpoint after `delay`.

    Nothing is ever given back to the stream one message at a time (nak): the consumer is
    recreated at checkpoint + 1, so deliveries restart in stream order and an acknowledgement of
    the latest delivery can safely acknowledge everything delivered before it."""

    def __init__(self, delay: float, reason: str):
        super().__init__(reason)
        self.delay = delay
