"""Retries at the edge, with httpx's MockTransport standing in for the gateway: which answers
are retried (429, 503, a connection that never opened; a read or an ingest after an ambiguous
failure), how long each wait is (exponential, never under Retry-After), and that `retries`
bounds them. The real gateway's 503 is exercised in tests/integration/test_client.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from habitus.client import (
    AsyncClient,
    Client,
    Conflict,
    ConnectionFailed,
    DeadlineExceeded,
    RateLimited,
    RetryEvent,
    RetryPolicy,
    Unavailable,
    turn,
)

Handler = Callable[[httpx.Request], httpx.Response]
RESULT = {"result": {"deleted": True}}


def unavailable(retry_after: str | None = "0") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(503, json={"error": {"code": "unavailable", "message": "retry later"}},
                          headers=headers)


def scripted(*answers: httpx.Response | type[Exception]) -> tuple[Handler, list[httpx.Request]]:
    """A handler answering in order (an exception class is raised as a transport error)."""
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        step = queue.pop(0)
        if isinstance(step, httpx.Response):
            return step
        raise step("scripted", request=request)  # type: ignore[call-arg]

    return handle, seen


def client(handler: Handler, events: list[RetryEvent] | None = None, **options: Any) -> Client:
    options.setdefault("backoff", 0.001)
    return Client("http://gw", "k", transport=httpx.MockTransport(handler),
                  on_retry=events.append if events is not None else None, **options)


def test_a_503_is_retried_until_it_succeeds_and_each_retry_is_reported() -> None:
    handler, seen = scripted(unavailable(), unavailable(), httpx.Response(200, json=RESULT))
    events: list[RetryEvent] = []
    with client(handler, events) as c:
        assert c.delete_rule("dana", "shell", "r1") is True
    assert len(seen) == 3
    assert [e.attempt for e in events] == [1, 2]
    assert all(isinstance(e.error, Unavailable) for e in events)
    assert seen[0].headers["authorization"] == "Bearer k"
    assert json.loads(seen[2].content) == {"user_id": "dana", "scope": "user",
                                           "tool_name": "shell", "id": "r1"}


def test_retries_are_bounded_and_the_last_error_is_raised() -> None:
    handler, seen = scripted(*[unavailable()] * 3)
    with client(handler, retries=2) as c, pytest.raises(Unavailable) as raised:
        c.habits("dana")
    assert len(seen) == 3 and raised.value.status == 503
    handler, seen = scripted(unavailable())
    with client(handler, retries=0) as c, pytest.raises(Unavailable):
        c.habits("dana")
    assert len(seen) == 1


def test_the_wait_honours_retry_after() -> None:
    limited = httpx.Response(429, json={"error": {"code": "rate_limited", "message": "slow"}},
                             headers={"Retry-After": "1"})
    handler, _ = scripted(limited, httpx.Response(200, json=RESULT))
    events: list[RetryEvent] = []
    with client(handler, events, backoff=0.001) as c:
        assert c.delete_rule(None, "*", "r1") is True
    (event,) = events
    assert isinstance(event.error, RateLimited) and event.error.retry_after == 1.0
    assert event.delay >= 1.0


def test_a_retry_after_longer_than_max_backoff_is_raised_not_waited_out() -> None:
    handler, seen = scripted(unavailable("120"))
    with client(handler, max_backoff=5.0) as c, pytest.raises(Unavailable) as raised:
        c.habits("dana")
    assert len(seen) == 1 and raised.value.retry_after == 120.0


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(retries=5, backoff=1.0, max_backoff=8.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 8.0)]:
        delays = [policy.delay(attempt, None) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, min(delays))
        assert len(set(delays)) > 1  # jittered: clients that failed together spread out
    assert policy.delay(1, 3.0) == 3.0
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_permanent_errors_are_not_retried() -> None:
    stale = httpx.Response(409, json={"error": {"code": "conflict", "message": "stale"}})
    handler, seen = scripted(stale)
    with client(handler) as c, pytest.raises(Conflict):
        c.approve("dana", "h1", "0" * 64)
    assert len(seen) == 1


def test_a_connection_that_never_opened_is_retried_even_for_a_command() -> None:
    handler, seen = scripted(httpx.ConnectError, httpx.Response(200, json={"result": {
        "deleted": False}}))
    with client(handler) as c:
        assert c.delete_rule("dana", "shell", "r1") is False
    assert len(seen) == 2


def test_a_command_that_may_have_been_sent_is_not_retried_but_a_read_is() -> None:
    handler, seen = scripted(httpx.ReadTimeout)
    with client(handler) as c, pytest.raises(ConnectionFailed) as raised:
        c.delete_rule("dana", "shell", "r1")
    assert len(seen) == 1 and raised.value.sent is True and raised.value.status is None
    handler, seen = scripted(httpx.ReadTimeout, httpx.Response(200, json={"result": {
        "rules": []}}))
    with client(handler) as c:
        assert c.rules("dana").rules == []
    assert len(seen) == 2


def test_an_unconfirmed_ingest_is_retried_with_the_same_event_ids() -> None:
    unconfirmed = httpx.Response(504, json={"error": {"code": "deadline_exceeded",
                                                      "message": "not confirmed"}})
    ok = httpx.Response(200, json={"accepted": 0, "duplicates": 2, "rejected": 0,
                                   "results": [{"index": 0, "status": "duplicate"},
                                               {"index": 1, "status": "duplicate"}]})
    handler, seen = scripted(unconfirmed, ok)
    with client(handler) as c:
        result = c.ingest(turn("dana", "hi", "hello"),
                          {"type": "FeedbackGiven", "user_id": "dana",
                           "payload": {"turn_id": "t1", "score": 1.0}})
    assert result.duplicates == 2 and result.ok
    first, second = (json.loads(r.content) for r in seen)
    assert first == second  # the feedback's id was drawn once, before the first attempt
    assert "event_id" in first[1] and "event_id" not in first[0]  # a turn's id derives
    # ...while an unconfirmed command is raised: it may have taken effect
    handler, seen = scripted(unconfirmed)
    with client(handler) as c, pytest.raises(DeadlineExceeded):
        c.declare("dana", "When I ask", "Answer")
    assert len(seen) == 1


@pytest.mark.asyncio
async def test_the_async_client_retries_the_same_way() -> None:
    handler, seen = scripted(unavailable(), httpx.ConnectError,
                             httpx.Response(200, json=RESULT))
    events: list[RetryEvent] = []
    async with AsyncClient("http://gw", "k", transport=httpx.MockTransport(handler),
                           backoff=0.001, on_retry=events.append) as c:
        assert await c.delete_rule("dana", "shell", "r1") is True
    assert len(seen) == 3 and [type(e.error) for e in events] == [Unavailable,
                                                                   ConnectionFailed]
    handler, seen = scripted(*[unavailable()] * 2)
    async with AsyncClient("http://gw", "k", transport=httpx.MockTransport(handler),
                           backoff=0.001, retries=1) as c:
        with pytest.raises(Unavailable):
            await c.habits("dana")
    assert len(seen) == 2
