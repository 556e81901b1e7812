"""Gateway build_event: every rejection rule for a POSTed item, without I/O."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

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
    assert uuid.UUID(ev.event_id).version == 7
    assert ev.payload.user_message == TURN["user_message"]
    assert CATALOG.subject(ev) == "habitus.v1.ingest.turn.acme.u1"


def test_each_item_gets_its_own_event_id() -> None:
    ids = {build(item()).event.event_id for _ in range(20)}  # type: ignore[union-attr]
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
    a = build(item(event_id=eid, occurred_at=5.0)).event
    b = build(item(event_id=eid, occurred_at=5.0)).event
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
                           "to": "me@x", "body": "hi", "sent_at": 1.0}),
        ("DocumentIngested", {"source_id": "s", "chunk_id": "c", "text": "t"}),
        ("ProviderProfileSynced", {"toolkit": "gmail", "connection_id": "c",
                                   "fields": {"email": "a@b"}}),
        ("FeedbackGiven", {"turn_id": "t1", "score": 1}),
        ("TraceCompleted", {"trace_id": "tr", "query": "q", "agent": "a", "model": "m",
                            "engine": "e", "result": "r", "started_at": 1, "ended_at": 2,
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
