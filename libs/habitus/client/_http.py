"""What the sync and async clients share: reading answers, and when and how long to retry.

Retries follow the gateway's contract: 429 and 503 say "try again later" (with Retry-After),
so they are retried with exponential backoff, never sooner than Retry-After; every other
error is permanent and raised at once. A failed connection is retried when the request never
left (connect errors), or when sending it again is harmless: a read, or an ingest batch, whose
event ids make a re-sent item a duplicate. A 504 (sent, not confirmed) is retried for the same
two. A Retry-After longer than `max_backoff` is not waited out: the error is raised with its
`retry_after`, since blocking an agent for a minute is the caller's decision to make.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import RetryCallState

from habitus import __version__
from habitus.client.errors import (
    ConnectionFailed,
    DeadlineExceeded,
    HabitusError,
    RateLimited,
    Unavailable,
    UnexpectedResponse,
    error_class,
    field_of,
)
from habitus.client.items import IngestResult

log = logging.getLogger("habitus.client")

USER_AGENT = f"habitus-client/{__version__}"
DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class RetryEvent:
    """Passed to `on_retry` before each wait: which attempt failed, how, and the wait."""

    attempt: int
    delay: float
    error: HabitusError


@dataclass(frozen=True)
class RetryPolicy:
    """At most `retries` retries; the n-th waits about `backoff * 2**(n-1)` seconds (half of it
    random, so clients that failed together do not retry together), at most `max_backoff`, and
    never less than the answer's Retry-After."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retries, backoff and max_backoff must not be negative")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        ceiling = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        wait = ceiling / 2 + random.uniform(0, ceiling / 2)
        return float(max(wait, retry_after or 0.0))

    def should_retry(self, exc: BaseException, idempotent: bool) -> bool:
        if not isinstance(exc, HabitusError):
            return False
        if exc.retry_after is not None and exc.retry_after > self.max_backoff:
            return False
        if isinstance(exc, ConnectionFailed):
            return idempotent or not exc.sent
        if isinstance(exc, DeadlineExceeded):
            return idempotent
        return isinstance(exc, RateLimited | Unavailable)

    def tenacity_options(self, idempotent: bool,
                         on_retry: Callable[[RetryEvent], None] | None) -> dict[str, Any]:
        """Options for `tenacity.Retrying` / `AsyncRetrying` (the caller adds `sleep`)."""
        from tenacity import retry_if_exception, stop_after_attempt

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            after = exc.retry_after if isinstance(exc, HabitusError) else None
            return self.delay(state.attempt_number, after)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if not isinstance(exc, HabitusError):
                return
            delay = state.upcoming_sleep
            log.info("habitus: %s; retry %d of %d in %.2fs", exc, state.attempt_number,
                     self.retries, delay)
            if on_retry is not None:
                on_retry(RetryEvent(state.attempt_number, delay, exc))

        return {
            "stop": stop_after_attempt(self.retries + 1),
            "wait": wait,
            "retry": retry_if_exception(lambda e: self.should_retry(e, idempotent)),
            "before_sleep": before_sleep,
            "reraise": True,
        }


def headers(api_key: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    if not api_key:
        raise ValueError("an API key is required (`habitus keys create --tenant T` makes one)")
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT,
            "Accept": "application/json", **(extra or {})}


def timeout_of(timeout: float | httpx.Timeout) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)


def scaled(timeout: httpx.Timeout, factor: float) -> httpx.Timeout:
    """The read timeout stretched for a method the gateway lets run longer (Analyze)."""
    if factor == 1.0 or timeout.read is None:
        return timeout
    return httpx.Timeout(connect=timeout.connect, read=timeout.read * factor,
                         write=timeout.write, pool=timeout.pool)


def connection_failed(exc: httpx.TransportError) -> ConnectionFailed:
    """No answer: `sent` is False only when the request certainly never reached the gateway."""
    never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_failed"
    where = exc.request.url if _has_request(exc) else "the gateway"
    return ConnectionFailed(code, f"{type(exc).__name__} calling {where}: {exc}",
                            sent=not never_sent)


def _has_request(exc: httpx.TransportError) -> bool:
    try:
        exc.request  # noqa: B018 (raises when the error carries no request)
    except RuntimeError:
        return False
    return True


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def body_of(response: httpx.Response) -> Any:
    """The answer's JSON; an error (typed by status and code) for anything but 2xx."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if response.is_success and isinstance(body, dict):
        return body
    raise error_of(response, body)


def error_of(response: httpx.Response, body: Any) -> HabitusError:
    status = response.status_code
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = str(error.get("code", "")), str(error.get("message", ""))
    elif response.is_success:
        return UnexpectedResponse(status, "unexpected_body",
                                  f"not a JSON object: {response.text[:200]!r}")
    else:  # not the gateway's shape: a proxy in between, or not a Habitus gateway
        code, message = "", f"HTTP {status}: {response.text.strip()[:500] or 'no body'}"
    cls = error_class(code, status)
    field = field_of(message) if 400 <= status < 500 else None
    results = body.get("results") if isinstance(body, dict) else None
    result = IngestResult.from_body(body) if isinstance(results, list) else None
    extra = {k: v for k, v in body.items() if k != "error"} if isinstance(body, dict) else {}
    return cls(status, code or _STATUS_CODES.get(status, "http_error"), message, field,
               retry_after=retry_after(response), result=result, body=extra)


#: the code of a bare status (an answer not in the gateway's shape)
_STATUS_CODES = {502: "unavailable", 503: "unavailable", 504: "deadline_exceeded",
                 429: "rate_limited", 401: "unauthenticated", 404: "not_found"}


def rpc_result(body: Mapping[str, Any], method: str) -> Any:
    if "result" not in body:
        raise UnexpectedResponse(200, "unexpected_body", f"{method}: no `result` in the answer")
    return body["result"]
