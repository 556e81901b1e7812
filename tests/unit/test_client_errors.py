"""The client's reading of the gateway's errors: the class by code, the field named by the
message, Retry-After, and ingest results carried by a refused batch."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from habitus.client import (
    Conflict,
    ConnectionFailed,
    DeadlineExceeded,
    HabitusError,
    InvalidArgument,
    InvalidEvent,
    NotFound,
    RateLimited,
    Unauthenticated,
    Unavailable,
    UnexpectedResponse,
)
from habitus.client._http import body_of, connection_failed, retry_after
from habitus.client.errors import field_of


def answer(status: int, body: object = None, **headers: str) -> httpx.Response:
    request = httpx.Request("POST", "http://gw/v1/rpc/x")
    if body is None:
        return httpx.Response(status, text="", headers=headers, request=request)
    return httpx.Response(status, json=body, headers=headers, request=request)


def error(code: str, message: str) -> dict[str, object]:
    return {"error": {"code": code, "message": message}}


@pytest.mark.parametrize(("message", "field"), [
    ("user_id: String should match pattern '^[^_].*'", "user_id"),
    ("class: Input should be 'style', 'identity'; key: Field required", "class"),
    ("item 0: payload.user_message: Field required; nothing was published",
     "payload.user_message"),
    ("item 2: payload.tool_calls.0.ok: Input should be a valid boolean", "payload.tool_calls.0.ok"),
    ("params: Value error, user_id: required for a user-scoped rule", "user_id"),
    ("params: Value error, one of trace_id or turn_id is required", "params"),
    ("body: not JSON (Expecting value)", "body"),
    ("unknown method 'habits.nope'; the methods are a, b", None),
    ("habit h1 not found", None),
    ("", None),
])
def test_the_field_is_what_the_message_names_first(message: str, field: str | None) -> None:
    assert field_of(message) == field


@pytest.mark.parametrize(("status", "code", "cls"), [
    (400, "invalid_argument", InvalidArgument), (401, "unauthenticated", Unauthenticated),
    (404, "not_found", NotFound), (409, "conflict", Conflict),
    (422, "invalid_event", InvalidEvent), (429, "rate_limited", RateLimited),
    (503, "unavailable", Unavailable), (504, "deadline_exceeded", DeadlineExceeded),
    (418, "teapot", HabitusError),
])
def test_each_code_raises_its_class(status: int, code: str, cls: type[HabitusError]) -> None:
    with pytest.raises(cls) as raised:
        body_of(answer(status, error(code, "x: went wrong")))
    assert type(raised.value) is cls
    assert (raised.value.status, raised.value.code) == (status, code)
    assert raised.value.field == ("x" if status < 500 else None)


def test_an_invalid_argument_carries_status_code_message_and_field() -> None:
    with pytest.raises(InvalidArgument) as raised:
        body_of(answer(400, error("invalid_argument", "class: Input should be 'style'")))
    exc = raised.value
    assert (exc.status, exc.code, exc.field) == (400, "invalid_argument", "class")
    assert exc.message == "class: Input should be 'style'"
    assert "400 invalid_argument: class" in str(exc)


def test_a_refused_batch_carries_its_per_item_results() -> None:
    body = {**error("invalid_event", "item 1: payload.user_at: Field required; nothing was "
                                     "published"),
            "accepted": 0, "duplicates": 0, "rejected": 1,
            "results": [{"index": 0, "status": "not_published", "type": "TurnRecorded",
                         "event_id": "e0"},
                        {"index": 1, "status": "rejected", "type": "TurnRecorded",
                         "errors": [{"field": "payload.user_at", "reason": "Field required"}]}]}
    with pytest.raises(InvalidEvent) as raised:
        body_of(answer(422, body))
    exc = raised.value
    assert exc.field == "payload.user_at"
    assert exc.result is not None and not exc.result.ok
    (bad,) = exc.result.rejected_items
    assert bad.index == 1 and bad.errors[0].field == "payload.user_at"
    assert exc.result.results[0].status == "not_published"


def test_an_answer_not_in_the_gateways_shape_is_typed_by_its_status() -> None:
    with pytest.raises(Unavailable) as raised:
        body_of(answer(502, None))
    assert raised.value.code == "unavailable" and "HTTP 502" in raised.value.message
    with pytest.raises(UnexpectedResponse):
        body_of(answer(200, ["not", "an", "object"]))


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after(answer(503, error("unavailable", "x"), **{"Retry-After": "5"})) == 5.0
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = retry_after(answer(503, None, **{"Retry-After": later}))
    assert seconds is not None and 25 < seconds <= 30
    assert retry_after(answer(503, None, **{"Retry-After": "soon"})) is None
    assert retry_after(answer(503, None)) is None


def test_a_connection_error_says_whether_the_request_may_have_been_sent() -> None:
    request = httpx.Request("POST", "http://gw/v1/events")
    assert connection_failed(httpx.ConnectError("refused", request=request)).sent is False
    assert connection_failed(httpx.ReadTimeout("slow", request=request)).sent is True
    assert connection_failed(httpx.ReadTimeout("slow", request=request)).code == "timeout"
    assert isinstance(connection_failed(httpx.ConnectError("x")), Unavailable)


def test_errors_survive_pickling_with_their_fields() -> None:
    exc = InvalidArgument(400, "invalid_argument", "key: bad", "key", retry_after=None)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is InvalidArgument
    assert (back.status, back.code, back.message, back.field) == (400, "invalid_argument",
                                                                  "key: bad", "key")
    lost = pickle.loads(pickle.dumps(ConnectionFailed("timeout", "slow", sent=True)))
    assert isinstance(lost, ConnectionFailed) and lost.sent is True and lost.status is None
