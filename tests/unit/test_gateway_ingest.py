"""Gateway build_event: every rejection rule for a POSTed item, without I/O."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from habitus.events import CATALOG
from services.gateway.ingest import ITEM_KEYS, ItemOutcome, build_event

TENANT = "acme"
NOW = 1_700_000_123.5
LIMIT = 256 * 1024

TURN = {
    "session_id": "s1",
    "turn_id": "t1",
    "channel": "chat",
    "user_message": "Keep it short please",
    "assistant_message": "OK",
    "user_at": 1_700_000_000.0,
    "assistant_at": 1_700_000_001.0,
}


def item(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"type": "TurnRecorded", "user_id": "u1",
                            "payload": copy.deepcopy(TURN)}
    base.update(over)
    return base


def build(it: Any, *, index: int = 0, tenant: str = TENANT, limit: int = LIMIT,
          **kw: Any) -> ItemOutcome:
    return build_event(it, index=index, tenant_id=tenant, now=NOW, max_item_bytes=limit, **kw)


def rejected(outcome: ItemOutcome) -> list[str]:
    assert not outcome.ok, outcome
    assert outcome.event is None
    assert outcome.errors
    return [e.field for e in outcome.errors]


# --------------------------------------------------------------------------- accepted


def test_accepted_item_gets_tenant_from_key_and_fills_envelope() -> None:
    out = build(item(), index=7)
    assert out.ok and out.errors == [] and not out.too_large
    assert out.index == 7
    assert out.type == "TurnRecorded"
    ev = out.event
    assert ev is not None
    assert ev.tenant_id == TENANT
    assert ev.user_id == "u1"
    assert ev.occurred_at == NOW
    assert ev.producer == "gateway"
    assert ev.schema_version == 1
    assert uuid.UUID(ev.event_id).version == 5  # derived from the natural key
    assert ev.payload.user_message == TURN["user_message"]
    assert CATALOG.subject(ev) == "habitus.v1.ingest.turn.acme.u1"


def test_each_turn_gets_its_own_event_id() -> None:
    ids = set()
    for n in range(20):
        it = item()
        it["payload"]["turn_id"] = f"t{n}"
        ids.add(build(it).event.event_id)  # type: ignore[union-attr]
    assert len(ids) == 20


def test_given_event_id_and_occurred_at_are_kept() -> None:
    eid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    out = build(item(event_id=eid, occurred_at=1_600_000_000.0, producer="agent-x",
                     causation_id="c1", correlation_id="r1"))
    assert out.event is not None
    assert out.event.event_id == eid
    assert out.event.occurred_at == 1_600_000_000.0
    assert out.event.producer == "agent-x"
    assert out.event.causation_id == "c1"
    assert out.event.correlation_id == "r1"


def test_given_ulid_is_kept() -> None:
    out = build(item(event_id="01ARZ3NDEKTSV4RRFFQ69G5FAV"))
    assert out.event is not None and out.event.event_id == "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_given_event_id_is_normalised() -> None:
    out = build(item(event_id="0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"))
    assert out.event is not None
    assert out.event.event_id == "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    out = build(item(event_id="01arz3ndektsv4rrffq69g5fav"))
    assert out.event is not None and out.event.event_id == "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_same_event_id_gives_same_event_for_dedup() -> None:
    eid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    a = build(item(event_id=eid, occurred_at=1_700_000_005.0)).event
    b = build(item(event_id=eid, occurred_at=1_700_000_005.0)).event
    assert a == b


def test_matching_tenant_in_item_is_accepted() -> None:
    out = build(item(tenant_id=TENANT))
    assert out.ok and out.event is not None and out.event.tenant_id == TENANT


def test_item_is_not_mutated() -> None:
    it = item()
    before = copy.deepcopy(it)
    build(it)
    assert it == before


def test_custom_default_producer() -> None:
    out = build(item(), default_producer="sdk")
    assert out.event is not None and out.event.producer == "sdk"


@pytest.mark.parametrize(
    ("type_name", "payload"),
    [
        ("EmailObserved", {"message_id": "m", "direction": "received", "from": "a@b",
                           "to": "me@x", "body": "hi", "sent_at": 1_764_000_001.0}),
        ("DocumentIngested", {"source_id": "s", "chunk_id": "c", "text": "t"}),
        ("ProviderProfileSynced", {"toolkit": "gmail", "connection_id": "c",
                                   "fields": {"email": "a@b"}}),
        ("FeedbackGiven", {"turn_id": "t1", "score": 1}),
        ("TraceCompleted", {"trace_id": "tr", "query": "q", "agent": "a", "model": "m",
                            "engine": "e", "result": "r",
                            "started_at": 1_764_000_001, "ended_at": 1_764_000_002,
                            "total_tokens": 3, "total_latency_seconds": 1}),
    ],
)
def test_every_ingest_type_accepted(type_name: str, payload: dict[str, Any]) -> None:
    out = build({"type": type_name, "user_id": "u1", "payload": payload})
    assert out.ok, out.errors
    assert out.event is not None and out.event.type == type_name


def test_item_keys_are_the_envelope_fields() -> None:
    from habitus.events import ENVELOPE_FIELDS

    assert set(ENVELOPE_FIELDS) == ITEM_KEYS


# --------------------------------------------------------------------------- rejected


@pytest.mark.parametrize("bad", [[], "TurnRecorded", 1, None, [item()]])
def test_non_object_rejected(bad: Any) -> None:
    out = build(bad, index=3)
    assert rejected(out) == ["item"]
    assert out.index == 3 and out.type is None


def test_unknown_top_level_keys_named() -> None:
    out = build(item(usr="x", extra=1))
    assert rejected(out) == ["extra", "usr"]
    assert all(e.reason == "unknown field" for e in out.errors)


def test_missing_type() -> None:
    it = item()
    del it["type"]
    out = build(it)
    assert rejected(out) == ["type"]
    assert out.type is None


@pytest.mark.parametrize("type_value", ["Nope", "turnrecorded", "", 5, None])
def test_unknown_type_lists_ingest_types(type_value: Any) -> None:
    out = build(item(type=type_value))
    assert rejected(out) == ["type"]
    reason = out.errors[0].reason
    for t in CATALOG.ingest_types():
        assert t in reason
    assert "CandidateEmitted" not in reason


@pytest.mark.parametrize("domain_type", ["CandidateEmitted", "FacetPinned", "UserErased",
                                         "CacheRebuilt"])
def test_domain_type_is_not_ingestible(domain_type: str) -> None:
    out = build(item(type=domain_type, payload={"reason": "x"}))
    assert rejected(out) == ["type"]
    assert out.type == domain_type
    assert "not ingested" in out.errors[0].reason


@pytest.mark.parametrize("other", ["beta", "ACME", "", None, 1])
def test_tenant_mismatch_rejected(other: Any) -> None:
    out = build(item(tenant_id=other))
    assert rejected(out) == ["tenant_id"]


def test_missing_user_id() -> None:
    it = item()
    del it["user_id"]
    assert rejected(build(it)) == ["user_id"]


@pytest.mark.parametrize("user", ["a.b", "", "a b", "*", ">", "x" * 65, "u1\n", 42, None])
def test_bad_user_id(user: Any) -> None:
    assert rejected(build(item(user_id=user))) == ["user_id"]


@pytest.mark.parametrize("eid", ["nope", "0190a1b2c3d47e5f8a9b0c1d2e3f4a5b", 5,
                                 "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b\n"])
def test_bad_event_id(eid: Any) -> None:
    assert rejected(build(item(event_id=eid))) == ["event_id"]


def test_newer_schema_version_rejected() -> None:
    assert rejected(build(item(schema_version=2))) == ["schema_version"]


def test_oversize_item() -> None:
    big = item()
    big["payload"]["user_message"] = "x" * 2000
    size = len(json.dumps(big, separators=(",", ":"), ensure_ascii=False).encode())
    out = build(big, limit=size - 1)
    assert rejected(out) == ["item"]
    assert out.too_large is True
    assert out.type == "TurnRecorded"
    assert str(size - 1) in out.errors[0].reason
    # exactly at the limit is fine
    assert build(big, limit=size).ok


def test_size_counts_utf8_bytes_not_characters() -> None:
    it = item()
    it["payload"]["user_message"] = "é" * 100  # 200 bytes in UTF-8
    size = len(json.dumps(it, separators=(",", ":"), ensure_ascii=False).encode())
    chars = len(json.dumps(it, separators=(",", ":"), ensure_ascii=False))
    assert size > chars
    out = build(it, limit=chars)
    assert out.too_large


def test_bad_payload_field_named() -> None:
    it = item()
    del it["payload"]["user_message"]
    out = build(it)
    assert rejected(out) == ["payload.user_message"]
    assert out.type == "TurnRecorded"
    assert not out.too_large


def test_typo_payload_field_named() -> None:
    it = item()
    it["payload"]["user_msg"] = it["payload"].pop("user_message")
    assert set(rejected(build(it))) == {"payload.user_message", "payload.user_msg"}


def test_missing_payload() -> None:
    it = item()
    del it["payload"]
    assert rejected(build(it)) == ["payload"]


def test_infinity_in_a_float_field_is_rejected() -> None:
    it = json.loads(json.dumps(item()).replace('"user_at": 1700000000.0',
                                               '"user_at": Infinity'))
    assert it["payload"]["user_at"] == float("inf")
    out = build(it)
    assert rejected(out) == ["payload.user_at"]


# --------------------------------------------------------------------------- strict types


@pytest.mark.parametrize(
    ("field", "value"),
    [("user_at", True), ("user_at", "1764460800"), ("user_at", None), ("session_id", 5),
     ("channel", ["chat"])],
)
def test_coerced_types_are_rejected(field: str, value: Any) -> None:
    it = item()
    it["payload"][field] = value
    assert rejected(build(it)) == [f"payload.{field}"]


def test_coerced_envelope_fields_are_rejected() -> None:
    assert rejected(build(item(occurred_at="1700000000"))) == ["occurred_at"]
    assert rejected(build(item(occurred_at=False))) == ["occurred_at"]
    assert rejected(build(item(producer=7))) == ["producer"]


def test_an_int_is_still_a_float() -> None:
    it = item()
    it["payload"]["user_at"] = 1_700_000_000
    out = build(it)
    assert out.ok, out.errors
    assert out.event is not None and out.event.payload.user_at == 1_700_000_000.0


def test_nested_coercion_is_rejected() -> None:
    it = item()
    it["payload"]["tool_calls"] = [{"tool_name": "search", "ok": "yes"}]
    assert rejected(build(it)) == ["payload.tool_calls.0.ok"]


# --------------------------------------------------------------------------- unstorable text


@pytest.mark.parametrize(
    ("where", "text"),
    [("user_message", "a\x00b"), ("user_message", "half \ud83d of an emoji"),
     ("assistant_message", "\udc00"), ("channel", "\x00")],
)
def test_text_that_cannot_be_stored_is_rejected_naming_the_field(where: str, text: str
                                                                 ) -> None:
    it = item()
    it["payload"][where] = text
    out = build(it)
    assert rejected(out) == [f"payload.{where}"]
    reason = out.errors[0].reason
    assert "NUL" in reason or "surrogate" in reason
    json.dumps(out.errors[0].as_dict(), ensure_ascii=False).encode()  # the answer encodes


def test_unstorable_text_deep_in_free_form_data_is_named() -> None:
    it = {"type": "TraceCompleted", "user_id": "u1", "payload": {
        "trace_id": "tr", "query": "q", "agent": "a", "model": "m", "engine": "e",
        "result": "r", "started_at": 1_764_000_001, "ended_at": 1_764_000_002,
        "total_tokens": 3, "total_latency_seconds": 1,
        "steps": [{"step_type": "tool", "timestamp": 1_764_000_001, "duration_seconds": 0,
                   "output": {"rows": ["ok", "bad\x00"]}}]}}
    assert rejected(build(it)) == ["payload.steps.0.output.rows.1"]


def test_a_key_that_cannot_be_stored_is_rejected_escaped() -> None:
    it = {"type": "ProviderProfileSynced", "user_id": "u1",
          "payload": {"toolkit": "gmail", "connection_id": "c",
                      "fields": {"email": "a@b", "nick\x00name": "x"}}}
    out = build(it)
    assert rejected(out) == ["payload.fields.nick\\u0000name"]
    assert "key" in out.errors[0].reason


def test_a_valid_surrogate_pair_is_fine() -> None:
    it = json.loads(json.dumps(item()).replace("Keep it short please", "ok \\ud83d\\ude00"))
    out = build(it)
    assert out.ok, out.errors
    assert out.event is not None and out.event.payload.user_message == "ok \U0001f600"


def test_an_unstorable_type_name_is_not_echoed() -> None:
    out = build(item(type="Turn\ud800"))
    assert rejected(out) == ["type"]
    assert out.type is None


# --------------------------------------------------------------------------- future times

SKEW = 300.0


def trace(**over: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "trace_id": "tr", "query": "q", "agent": "a", "model": "m", "engine": "e",
        "result": "r", "started_at": NOW - 10, "ended_at": NOW - 5, "total_tokens": 3,
        "total_latency_seconds": 1,
        "steps": [{"step_type": "llm", "timestamp": NOW - 9, "duration_seconds": 1},
                  {"step_type": "tool", "timestamp": NOW - 8, "duration_seconds": 1}]}
    payload.update(over)
    return {"type": "TraceCompleted", "user_id": "u1", "payload": payload}


def skewed(it: Any) -> ItemOutcome:
    return build(it, max_clock_skew=SKEW)


def test_times_within_the_skew_are_accepted() -> None:
    it = trace(ended_at=NOW + SKEW)
    assert skewed(it).ok
    assert skewed(item(occurred_at=NOW + SKEW)).ok


@pytest.mark.parametrize(
    ("it", "path"),
    [
        (item(occurred_at=NOW + SKEW + 1), "occurred_at"),
        (trace(ended_at=NOW + 86_400 * 365), "payload.ended_at"),
        (trace(steps=[{"step_type": "llm", "timestamp": NOW, "duration_seconds": 1},
                      {"step_type": "llm", "timestamp": NOW + 3600, "duration_seconds": 1}]),
         "payload.steps.1.timestamp"),
    ],
    ids=["occurred_at", "payload", "nested"],
)
def test_a_time_far_in_the_future_is_rejected_naming_its_path(it: dict[str, Any], path: str
                                                              ) -> None:
    out = skewed(it)
    assert rejected(out) == [path]
    assert "future" in out.errors[0].reason


def test_every_timestamp_field_of_every_ingest_type_is_checked() -> None:
    """Optional and required ones alike, so a new Timestamp field is covered without a list."""
    far = NOW + 10 * SKEW
    cases = {
        "payload.user_at": item(payload={**TURN, "user_at": far, "assistant_at": far}),
        "payload.assistant_at": item(payload={**TURN, "assistant_at": far}),
        "payload.previous_assistant_at": item(payload={**TURN, "previous_assistant_at": far}),
        "payload.sent_at": {"type": "EmailObserved", "user_id": "u1", "payload": {
            "message_id": "m", "direction": "sent", "from": "a@b", "body": "b",
            "sent_at": far}},
        "payload.synced_at": {"type": "ProviderProfileSynced", "user_id": "u1", "payload": {
            "toolkit": "gmail", "connection_id": "c", "fields": {}, "synced_at": far}},
        "payload.started_at": trace(started_at=far, ended_at=far),
    }
    for path, it in cases.items():
        assert path in rejected(skewed(it)), path
    # without a limit (the default) nothing is checked
    assert build(cases["payload.user_at"]).ok


@pytest.mark.parametrize("early", [0, -0.0, 0.0, 946_684_799.9, 1_700_000_000 / 1000])
def test_times_before_2000_are_refused_in_every_field(early: float) -> None:
    for path, it in {
        "payload.user_at": item(payload={**TURN, "user_at": early}),
        "payload.previous_assistant_at": item(payload={**TURN, "previous_assistant_at": early}),
        "occurred_at": item(occurred_at=early),
        "payload.started_at": trace(started_at=early),
    }.items():
        out = build(it)
        assert path in rejected(out), (path, early)
        assert out.reason == "too_early"
        assert "before 2000-01-01T00:00:00Z" in out.errors[0].reason


def test_the_first_second_of_2000_is_accepted() -> None:
    assert build(item(occurred_at=946_684_800.0)).ok


@pytest.mark.parametrize(("payload", "field", "gap"), [
    ({"user_at": 1_700_000_100.0, "assistant_at": 1_700_000_099.5}, "payload.assistant_at",
     "0.5s before payload.user_at"),
    ({"user_at": 1_700_000_100.0, "assistant_at": 1_700_000_101.0,
      "previous_assistant_at": 1_700_000_160.0}, "payload.user_at",
     "60s before payload.previous_assistant_at"),
])
def test_a_turn_whose_times_run_backwards_is_refused(payload: dict[str, Any], field: str,
                                                     gap: str) -> None:
    out = build(item(payload={**TURN, **payload}))
    assert rejected(out) == [field] and out.reason == "time_order"
    assert gap in out.errors[0].reason


def test_an_answer_in_the_same_second_as_its_message_is_fine() -> None:
    assert build(item(payload={**TURN, "user_at": 1_700_000_100.0,
                               "assistant_at": 1_700_000_100.0,
                               "previous_assistant_at": 1_700_000_100.0})).ok


# --------------------------------------------------------------------------- natural keys


def test_the_same_item_without_event_id_gets_the_same_id_on_retry() -> None:
    a, b = build(item()), build(item())
    assert a.event is not None and b.event is not None
    assert a.event.event_id == b.event.event_id


def test_natural_key_ids_are_scoped_to_tenant_and_user() -> None:
    mine = build(item()).event
    other_tenant = build(item(), tenant="beta").event
    other_user = build(item(user_id="u2")).event
    assert mine is not None and other_tenant is not None and other_user is not None
    assert len({mine.event_id, other_tenant.event_id, other_user.event_id}) == 3


@pytest.mark.parametrize(
    ("type_name", "payload", "key_field", "other"),
    [
        ("EmailObserved", {"message_id": "m1", "direction": "received", "from": "a@b",
                           "body": "hi", "sent_at": 1_764_000_001.0}, "message_id", "m2"),
        ("DocumentIngested", {"source_id": "s", "chunk_id": "c1", "text": "t"}, "chunk_id",
         "c2"),
        ("TraceCompleted", {"trace_id": "tr1", "query": "q", "agent": "a", "model": "m",
                            "engine": "e", "result": "r",
                            "started_at": 1_764_000_001, "ended_at": 1_764_000_002,
                            "total_tokens": 3, "total_latency_seconds": 1}, "trace_id", "tr2"),
        ("ProviderProfileSynced", {"toolkit": "gmail", "connection_id": "c",
                                   "fields": {"email": "a@b"}, "synced_at": 1_764_000_010.0},
         "synced_at", 1_764_000_011.0),
    ],
)
def test_each_ingest_type_derives_its_id_from_its_natural_key(
    type_name: str, payload: dict[str, Any], key_field: str, other: Any
) -> None:
    def event_id(p: dict[str, Any]) -> str:
        out = build({"type": type_name, "user_id": "u1", "payload": p})
        assert out.event is not None, out.errors
        return out.event.event_id

    first = event_id(payload)
    assert event_id(copy.deepcopy(payload)) == first
    assert event_id({**payload, key_field: other}) != first
    assert uuid.UUID(first).version == 5


def test_a_turn_retried_with_a_different_text_keeps_its_id() -> None:
    """The key is the occurrence, not the content: a changed retry is a conflict, not news."""
    changed = item()
    changed["payload"]["user_message"] = "something else"
    assert build(item()).event.event_id == build(changed).event.event_id  # type: ignore[union-attr]


def test_a_sync_without_synced_at_is_keyed_by_its_fields() -> None:
    def sync(fields: dict[str, Any]) -> str:
        out = build({"type": "ProviderProfileSynced", "user_id": "u1",
                     "payload": {"toolkit": "gmail", "connection_id": "c", "fields": fields}})
        assert out.event is not None, out.errors
        return out.event.event_id

    assert sync({"timezone": "UTC"}) == sync({"timezone": "UTC"})
    assert sync({"timezone": "UTC"}) != sync({"timezone": "Europe/Paris"})


def test_feedback_gets_a_fresh_id_each_time() -> None:
    it = {"type": "FeedbackGiven", "user_id": "u1", "payload": {"turn_id": "t1", "score": 1}}
    ids = {build(copy.deepcopy(it)).event.event_id for _ in range(5)}  # type: ignore[union-attr]
    assert len(ids) == 5


def test_a_given_event_id_wins_over_the_natural_key() -> None:
    eid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    out = build(item(event_id=eid))
    assert out.event is not None and out.event.event_id == eid


def test_every_ingest_type_but_feedback_has_a_natural_key() -> None:
    from habitus.events.ingest import NATURAL_KEYS

    keyed = {t.__name__ for t in NATURAL_KEYS}
    assert keyed == set(CATALOG.ingest_types()) - {"FeedbackGiven"}
    for payload, fields in NATURAL_KEYS.items():
        assert set(fields) <= set(payload.model_fields), payload


@pytest.mark.parametrize("user", ["_tenant", "_all", "_anything"])
def test_user_ids_beginning_with_an_underscore_are_habitus_own(user: str) -> None:
    # `_tenant` carries what belongs to every user of the tenant (tenant-wide tool rules):
    # a caller writing as it would reach every other user's prompt.
    outcome = build(item(user_id=user))
    assert rejected(outcome) == ["user_id"]
    assert "reserved" in outcome.errors[0].reason
    assert build(item(user_id="u_1-x")).ok


_key_text = st.text(min_size=1, max_size=30)
# times the gateway accepts: from its floor (2000-01-01) on
_times = st.one_of(st.floats(min_value=946_684_800, max_value=4e9, allow_nan=False),
                   st.integers(min_value=946_684_800, max_value=4_000_000_000))


@settings(max_examples=150, deadline=None)
@given(session=_key_text, turn=_key_text, message=_key_text, source=_key_text,
       chunk=_key_text, connection=_key_text, synced=st.one_of(st.none(), _times),
       trace=_key_text, user=st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z"))
def test_the_id_derived_from_the_item_as_sent_is_the_one_from_the_validated_payload(
        session: str, turn: str, message: str, source: str, chunk: str, connection: str,
        synced: float | int | None, trace: str, user: str) -> None:
    """The gateway derives natural ids before validating (one decode per item, no copy); an id
    is stored and deduplicated on, so it must be exactly the one the validated payload gives,
    whatever the key values: any text, a float or an int time, no time at all."""
    from habitus.events.ingest import natural_event_id

    payloads = {
        "TurnRecorded": {"session_id": session, "turn_id": turn, "channel": "cli",
                         "user_message": "hi", "assistant_message": "hello",
                         "user_at": 1_764_000_001.0, "assistant_at": 1_764_000_002.0},
        "EmailObserved": {"message_id": message, "direction": "received", "from": "a@b",
                          "body": "hi", "sent_at": 1_764_000_001.0},
        "DocumentIngested": {"source_id": source, "chunk_id": chunk, "text": "t"},
        "ProviderProfileSynced": {"toolkit": "gmail", "connection_id": connection,
                                  "fields": {"email": "a@b"},
                                  **({} if synced is None else {"synced_at": synced})},
        "TraceCompleted": {"trace_id": trace, "query": "q", "agent": "a", "model": "m",
                           "engine": "e", "result": "r",
                            "started_at": 1_764_000_001, "ended_at": 1_764_000_002,
                           "total_tokens": 3, "total_latency_seconds": 1},
    }
    for type_name, payload in payloads.items():
        out = build({"type": type_name, "user_id": user, "payload": payload})
        if out.event is None:  # a value the type refuses (blank text): nothing to derive
            continue
        event = out.event
        assert event.event_id == natural_event_id(event.payload, event.tenant_id,
                                                  event.user_id), type_name
