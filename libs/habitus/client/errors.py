"""Typed errors for what the gateway answers, so an agent branches on a class, not on a status.

The gateway's errors are `{"error": {"code", "message"}}` with an HTTP status; a refused
argument names its field at the start of the message (`user_id: String should match ...`, or
`item 0: payload.user_message: Field required; nothing was published` for ingest). The field
is parsed out here once, because "which field was wrong" is what a caller needs to fix the
call, and re-parsing messages in every agent is how clients drift.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from habitus.client.items import IngestResult

__all__ = (
    "Conflict",
    "ConnectionFailed",
    "DeadlineExceeded",
    "HabitusError",
    "InternalError",
    "InvalidArgument",
    "InvalidEvent",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "Unauthenticated",
    "Unavailable",
    "UnexpectedResponse",
    "field_of",
)

# `item 3: ` prefixes an ingest error; `Value error, ` a model validator's message (pydantic).
_ITEM = re.compile(r"^item \d+: ")
_FIELD = re.compile(r"^([^\s:;,]+): ")
_VALUE_ERROR = "Value error, "


class HabitusError(Exception):
    """An answer that is not a result.

    `status` is the HTTP status (None when no answer came: see `ConnectionFailed`), `code` the
    gateway's error code (`invalid_argument`, `not_found`, ...), `message` its text, `field` the
    argument it names (None when it names none). `retry_after` is the gateway's Retry-After in
    seconds, when it sent one. `result` is the per-item ingest answer when a batch was refused
    (`InvalidEvent`) or partly failed at publish time (`Conflict`, `Unavailable`).
    """

    def __init__(self, status: int | None, code: str, message: str, field: str | None = None,
                 *, retry_after: float | None = None, result: IngestResult | None = None,
                 body: Mapping[str, Any] | None = None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.result = result
        self.body: Mapping[str, Any] = body or {}
        super().__init__(f"{status if status is not None else '-'} {code}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle as cls(*args), which these constructors do not take: rebuild
        # from the attributes instead (an error sent across processes keeps its fields).
        return (_rebuild, (type(self), self.args), self.__dict__)


def _rebuild(cls: type[HabitusError], args: tuple[Any, ...]) -> HabitusError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class InvalidArgument(HabitusError):
    """400: an argument was refused; `field` names it (`class`, `payload.user_message`)."""


class InvalidEvent(InvalidArgument):
    """422: an ingest batch held a rejected item, so nothing of it was stored (the gateway's
    all-or-nothing default). `result.results` says, item by item, what was wrong; `field` is
    the first rejected item's first field. Send with `partial=True` to store the valid ones."""


class Unauthenticated(HabitusError):
    """401: no key, or a key the gateway does not know (or revoked)."""


class PermissionDenied(HabitusError):
    """403: the key may not do this (an admin key that names no tenant, for one)."""


class NotFound(HabitusError):
    """404: no such habit, rule, trace, facet or method."""


class Conflict(HabitusError):
    """409: a stale checksum or version, an action that does not apply to the current state,
    or (ingest) an event id already stored with another payload."""


class PayloadTooLarge(HabitusError):
    """413: the body, the batch or one item is over the gateway's limit."""


class RateLimited(HabitusError):
    """429: the key's rate limit; `retry_after` is the seconds left in the window."""


class InternalError(HabitusError):
    """500: a bug behind the gateway; retrying will not help until it is fixed."""


class Unavailable(HabitusError):
    """503: an outage behind the gateway (bus, database, a service not running). Retrying
    later is the remedy, which the client does by itself up to `retries` times."""


class ConnectionFailed(Unavailable):
    """No HTTP answer: the gateway could not be reached, or the connection failed or timed out
    mid-request. `sent` is False when the request certainly never reached the gateway (so
    retrying even a command is safe), True when it may have."""

    def __init__(self, code: str, message: str, *, sent: bool):
        super().__init__(None, code, message)
        self.sent = sent


class DeadlineExceeded(HabitusError):
    """504: the request was passed on but its answer did not come in time; it may have taken
    effect (an ingest retried with the same event ids is stored once)."""


class UnexpectedResponse(HabitusError):
    """The gateway answered something this client cannot read (a result that does not match
    the contract, a body that is not JSON): usually a client older than the server."""


_BY_CODE: dict[str, type[HabitusError]] = {
    "invalid_argument": InvalidArgument,
    "invalid_event": InvalidEvent,
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "method_not_allowed": InvalidArgument,
    "unsupported_media_type": InvalidArgument,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "rate_limited": RateLimited,
    "internal": InternalError,
    "unavailable": Unavailable,
    "deadline_exceeded": DeadlineExceeded,
}
_BY_STATUS: dict[int, type[HabitusError]] = {
    400: InvalidArgument, 401: Unauthenticated, 403: PermissionDenied, 404: NotFound,
    409: Conflict, 413: PayloadTooLarge, 422: InvalidEvent, 429: RateLimited,
    500: InternalError, 502: Unavailable, 503: Unavailable, 504: DeadlineExceeded,
}


def error_class(code: str, status: int) -> type[HabitusError]:
    """The class for a gateway code, else for the status (a proxy's bare 502), else the base."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status) or HabitusError


def field_of(message: str) -> str | None:
    """The argument a gateway message names, or None.

    >>> field_of("item 0: payload.user_message: Field required; nothing was published")
    'payload.user_message'
    >>> field_of("params: Value error, user_id: required for a user-scoped rule")
    'user_id'
    >>> field_of("unknown method 'x.y'; the methods are ...") is None
    True
    """
    text = _ITEM.sub("", message, count=1)
    match = _FIELD.match(text)
    if match is None:
        return None
    field = match.group(1)
    rest = text[match.end():]
    if field == "params" and rest.startswith(_VALUE_ERROR):
        # a model validator's message carries the real field after pydantic's prefix
        inner = _FIELD.match(rest[len(_VALUE_ERROR):])
        if inner is not None:
            return inner.group(1)
    return field
