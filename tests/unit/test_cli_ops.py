"""What the operator commands print and parse, without servers: event lines, subject filters,
dead letters' headers, the review list, and `--models`."""

from __future__ import annotations

import datetime
import json
from types import SimpleNamespace

import pytest

from habitus.cli.connect import where
from habitus.cli.dlq import Letter, dlq_filter
from habitus.cli.events import event_filter, event_json, event_line
from habitus.cli.habits import review_lines
from habitus.cli.output import cut, short
from habitus.cli.route import model_list
from habitus.ops.lag import Lag
from habitus.projection import dlq as h


def test_event_filters() -> None:
    # as the stream stores them: with the user's and the tenant's slot after the user
    assert event_filter(None, None, None) == "habitus.v1.event.*.*.*.*.*"
    assert event_filter("FacetUpdated", "acme", "u1") == (
        "habitus.v1.event.FacetUpdated.acme.u1.*.*")
    for bad in ("a.b", "*", ">", "", "a b"):
        with pytest.raises(ValueError, match="cannot be a subject token"):
            event_filter(None, bad, None)
    assert dlq_filter(None) == "habitus.v1.dlq.>"
    assert dlq_filter("proj_x") == "habitus.v1.dlq.proj_x.>"
    with pytest.raises(ValueError):
        dlq_filter("a.b")


def test_an_event_line() -> None:
    doc = {"type": "FacetUpdated", "tenant_id": "acme", "user_id": "u1",
           "occurred_at": 1_764_547_200.5, "payload": {"class": "style", "key": "k"}}
    assert event_line(json.dumps(doc).encode(), "s", 7) == (
        '2025-12-01T00:00:00.500Z  7  FacetUpdated  acme/u1  {"class":"style","key":"k"}')
    assert "(not an event)" in event_line(b"\xffnope", "habitus.v1.event.X.a.b", 3)


def test_an_event_as_json_is_the_whole_event_on_one_line() -> None:
    doc = {"type": "FacetUpdated", "payload": {"value": "x" * 500, "note": "[critical]"}}
    line = event_json(json.dumps(doc).encode(), "habitus.v1.event.FacetUpdated.a.b", 9)
    assert "\n" not in line
    assert json.loads(line) == {"seq": 9, "subject": "habitus.v1.event.FacetUpdated.a.b",
                                "event": doc}
    assert json.loads(event_json(b"\xffnope", "s", 3)) == {"seq": 3, "subject": "s",
                                                           "event": None, "data": "\ufffdnope"}


def test_cut_says_it_cut() -> None:
    assert cut("short", 10) == "short"
    assert cut("x" * 200, 120) == "x" * 119 + "…"


def test_short_cuts_with_an_ellipsis() -> None:
    assert short({"a": 1}) == '{"a":1}'
    text = short({"k": "x" * 500}, width=40)
    assert len(text) == 40 and text.endswith("…")


def test_behind_is_never_negative() -> None:
    lag = Lag("p", "s", "HABITUS_EVENTS", "proj_p", 10, 12, 0, 0, 0)
    assert lag.behind == 0
    assert Lag("p", "s", "S", "d", 10, 4, None, None, 0).behind == 6
    assert Lag("p", "s", "S", "d", 10, None, None, None, 0).behind is None


def test_a_dead_letter_from_its_headers() -> None:
    at = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
    msg = SimpleNamespace(seq=5, subject="habitus.v1.dlq.proj_x.acme.u1", time=at,
                          data=json.dumps({"event_id": "e1", "type": "TurnRecorded"}).encode(),
                          headers={h.CONSUMER: "proj_x", h.REASON: "apply_failed",
                                   h.DETAIL: "Boom: no", h.ORIGINAL_STREAM: "HABITUS_INGEST",
                                   h.ORIGINAL_SUBJECT: "habitus.v1.ingest.turn.acme.u1",
                                   h.ORIGINAL_SEQ: "42", h.DELIVERIES: "3"})
    letter = Letter.of(msg)
    assert (letter.consumer, letter.reason, letter.original_seq, letter.deliveries) == (
        "proj_x", "apply_failed", 42, 3)
    summary = letter.summary()
    assert summary["event_id"] == "e1" and summary["type"] == "TurnRecorded"
    assert "data" not in summary and summary["at"] == at.timestamp()
    bare = Letter.of(SimpleNamespace(seq=1, subject="s", time=None, data=None, headers=None))
    assert bare.original_seq is None and bare.summary()["event_id"] is None


def test_models_are_names_as_given() -> None:
    assert model_list("") == []
    assert model_list("a, qwen3:8b ,,deepseek-coder-v2:16b") == [
        "a", "qwen3:8b", "deepseek-coder-v2:16b"]


def _habit(habit_id: str, status: str = "candidate", blocked: list[str] | None = None
           ) -> dict[str, object]:
    return {"habit_id": habit_id, "status": status, "review_status": "awaiting_review",
            "blocked_by": blocked or []}


def test_review_lines_number_items_and_name_duplicates() -> None:
    review = {"items": [
        {"number": 1, "text": "When: I ask for a review\nDo: Point out missing tests",
         "habit": _habit("h1", "active"), "duplicates": [2], "similar": []},
        {"number": 2, "text": "When: I request a review\nDo: Mention missing tests",
         "habit": _habit("h2", blocked=["h1"]), "duplicates": [1], "similar": [3]},
    ], "pending_duplicates": 1}
    assert review_lines(review) == [
        "1. When: I ask for a review",
        "   Do: Point out missing tests",
        "   active / awaiting_review; h1; possible duplicate of #2",
        "2. When: I request a review",
        "   Do: Mention missing tests",
        "   candidate / awaiting_review, waits for h1; h2; possible duplicate of #1; "
        "similar to #3",
        "1 duplicate pair(s) wait for a decision",
    ]


def test_server_urls_are_printed_without_credentials() -> None:
    assert where("postgresql://habitus:s3cret@db:5432/habitus") == "postgresql://db:5432/habitus"
    assert where("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
