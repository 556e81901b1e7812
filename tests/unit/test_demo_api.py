"""The demo's client asks an idempotent command again when the gateway answered 504 (the change
recorded, its views late), and reports any other failure at once."""

from __future__ import annotations

import httpx
import pytest

from habitus.demo.api import Api

LATE = {"error": {"code": "deadline_exceeded",
                  "message": "habits.configure did not answer in time"}}


def api_answering(answers: list[tuple[int, dict[str, object]]]) -> tuple[Api, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        status, body = answers[min(len(asked), len(answers)) - 1]
        return httpx.Response(status, json=body)

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
