"""The demo's client asks an idempotent command again when the gateway answered 504 (the change
recorded, its views late), sends a batch the gateway pushed back (429, 503) again after the
wait it asked for, and reports any other failure at once."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from habitus.demo.api import Api

LATE = {"error": {"code": "deadline_exceeded",
                  "message": "habits.configure did not answer in time"}}


def api_answering(answers: list[tuple[int, Any]],
                  headers: dict[str, str] | None = None) -> tuple[Api, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        status, body = answers[min(len(asked), len(answers)) - 1]
        return httpx.Response(status, json=body, headers=headers if status in (429, 503)
                              else None)

    api = Api("http://gateway.test", "hab_test")
    api.client = httpx.Client(base_url="http://gateway.test",
                              transport=httpx.MockTransport(handler))
    return api, asked


def test_a_late_command_is_asked_again_until_it_applies() -> None:
    api, asked = api_answering([(504, LATE), (504, LATE), (200, {"result": {"ok": True}})])
    assert api.rpc("habits.configure", attempts=3, retention_days=30) == {"ok": True}
    assert asked == ["/v1/rpc/habits.configure"] * 3


def test_without_attempts_a_late_command_fails_naming_the_answer() -> None:
    api, asked = api_answering([(504, LATE), (200, {"result": {"ok": True}})])
    with pytest.raises(RuntimeError, match=r"habits\.configure answered 504"):
        api.rpc("habits.configure", retention_days=30)
    assert len(asked) == 1


def test_a_refusal_is_not_asked_again() -> None:
    refused = {"error": {"code": "invalid_argument", "message": "retention_days: too large"}}
    api, asked = api_answering([(400, refused), (200, {"result": {"ok": True}})])
    with pytest.raises(RuntimeError, match="answered 400"):
        api.rpc("habits.configure", attempts=3, retention_days=10**9)
    assert len(asked) == 1


BEHIND = {"error": {"code": "rate_limited", "message": "backpressure: the pipeline is 2s behind "
                    "end to end and this tenant sent 93% of the items in that time"}}
ITEMS = [{"type": "TurnRecorded", "user_id": "ana", "payload": {}}] * 3


class Clock:
    """A clock the waits move forward, so a two-minute budget runs out at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("status", [429, 503])
def test_a_pushed_back_batch_is_sent_again_after_the_wait_the_gateway_asked_for(
        status: int) -> None:
    api, asked = api_answering([(status, BEHIND), (status, BEHIND), (200, {"accepted": 3})],
                               headers={"Retry-After": "2"})
    clock = Clock()
    assert api.send(ITEMS, sleep=clock.sleep, clock=lambda: clock.now) == 3
    assert asked == ["/v1/events"] * 3
    assert len(clock.waits) == 2 and all(w >= 2 for w in clock.waits)


def test_a_batch_pushed_back_for_longer_than_two_minutes_fails_naming_the_answer() -> None:
    api, asked = api_answering([(429, BEHIND)], headers={"Retry-After": "7"})
    clock = Clock()
    with pytest.raises(RuntimeError, match=r"answered 429: .*backpressure"):
        api.send(ITEMS, sleep=clock.sleep, clock=lambda: clock.now)
    # no wait goes past the two minutes: the last one that would have is not waited
    assert 100 < clock.now <= 120 and all(w >= 7 for w in clock.waits)
    assert len(asked) == len(clock.waits) + 1


def test_a_refused_batch_is_not_sent_again() -> None:
    api, asked = api_answering([(400, {"error": {"code": "invalid_argument",
                                                 "message": "items[0].user_id: required"}})])
    clock = Clock()
    with pytest.raises(RuntimeError, match="answered 400"):
        api.send(ITEMS, sleep=clock.sleep, clock=lambda: clock.now)
    assert len(asked) == 1 and clock.waits == []
