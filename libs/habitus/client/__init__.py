"""The Python client of the Habitus gateway, sync (`Client`) and asyncio (`AsyncClient`).

    from habitus.client import Client, turn

    with Client.from_env() as habitus:
        habitus.ingest(turn("dana", "Please keep it short.", "Sure."))
        print(habitus.context("dana").text)

It speaks only the public HTTP API (`POST /v1/events`, `POST /v1/rpc/<method>`), so an agent
needs a URL and a key, never the bus or the database. Results are the contract's own models
(`habitus.contract`), errors are typed (`habitus.client.errors`), and outages (429, 503, a lost
connection) are retried with backoff that honours Retry-After. See docs/client.md.
"""

from habitus.client._http import RetryEvent, RetryPolicy
from habitus.client.aio import AsyncClient
from habitus.client.errors import (
    Conflict,
    ConnectionFailed,
    DeadlineExceeded,
    HabitusError,
    InternalError,
    InvalidArgument,
    InvalidEvent,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    Unauthenticated,
    Unavailable,
    UnexpectedResponse,
)
from habitus.client.items import (
    FieldIssue,
    IngestResult,
    Item,
    ItemResult,
    document,
    email,
    feedback,
    provider_profile,
    tool_call,
    trace,
    trace_step,
    turn,
)
from habitus.client.sync import Client

__all__ = (
    "AsyncClient",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "DeadlineExceeded",
    "FieldIssue",
    "HabitusError",
    "IngestResult",
    "InternalError",
    "InvalidArgument",
    "InvalidEvent",
    "Item",
    "ItemResult",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "RetryEvent",
    "RetryPolicy",
    "Unauthenticated",
    "Unavailable",
    "UnexpectedResponse",
    "document",
    "email",
    "feedback",
    "provider_profile",
    "tool_call",
    "trace",
    "trace_step",
    "turn",
)
