"""The event catalog: ingest contract, envelope, domain payloads, decode/upcast, subjects."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from habitus.events import (
    CATALOG,
    ENVELOPE_FIELDS,
    Catalog,
    Event,
    EventSpec,
    EventValidationError,
    FieldError,
    Payload,
    domain,
    ingest,
)
from habitus.events.evidence import (
    AgentTraceRef,
    DocumentChunkRef,
    EmailMessageRef,
    EvidenceRef,
    ProviderRef,
    SourceSummaryRef,
    ToolCallRef,
    TurnRef,
    TurnWindowRef,
)

TENANT = "acme"
USER = "u_1"
EVENT_ID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"

EVIDENCE = [
    {"type": "turn", "session_id": "s1", "turn_id": "t1"},
    {"type": "email_message", "message_id": "<m1@x>"},
]

# A valid JSON payload for every type in CATALOG. A new catalog type without a sample here
# fails test_every_catalog_type_has_a_sample.
SAMPLES: dict[str, dict[str, Any]] = {
    "TurnRecorded": {
        "session_id": "s1",
        "turn_id": "t1",
        "channel": "chat",
        "user_message": "Please keep answers short.",
        "assistant_message": "Sure.",
        "user_at": 1_700_000_000.0,
        "assistant_at": 1_700_000_005.5,
        "previous_assistant_at": 1_699_999_990.0,
        "tool_calls": [
            {"tool_name": "search", "ok": True, "output_summary": "3 hits",
             "duration_seconds": 0.4},
            {"tool_name": "email.send", "ok": False},
        ],
    },
    "EmailObserved": {
        "message_id": "<m1@example.com>",
        "direction": "sent",
        "from": "me@example.com",
        "to": ["you@example.com", "them@example.com"],
        "subject": "Hi",
        "body": "Hello there",
        "sent_at": 1_700_000_000.0,
    },
    "DocumentIngested": {"source_id": "drive:1", "chunk_id": "c0", "text": "Some text."},
    "ProviderProfileSynced": {
        "toolkit": "gmail",
        "connection_id": "conn-1",
        "fields": {"email": "me@example.com", "name": "Me", "timezone": "Europe/Paris",
                   "locale": "fr-FR"},
    },
    "TraceCompleted": {
        "trace_id": "tr1",
        "query": "find flights",
        "agent": "travel",
        "model": "gpt-x",
        "engine": "openai",
        "steps": [
            {"step_type": "tool", "timestamp": 1.0, "duration_seconds": 0.5,
             "input": {"q": "LHR"}, "output": ["BA1"], "metadata": {"k": 1}},
        ],
        "result": "BA1",
        "outcome": "success",
        "feedback": 0.9,
        "started_at": 1.0,
        "ended_at": 2.0,
        "total_tokens": 1234,
        "total_latency_seconds": 1.0,
        "cost_usd": 0.01,
    },
    "FeedbackGiven": {"trace_id": "tr1", "score": 0.75, "outcome": "partial"},
    "CandidateEmitted": {
        "class": "style",
        "key": "response.length",
        "value": "short",
        "cue_family": "explicit",
        "evidence": EVIDENCE,
        "initial_confidence": 0.6,
        "observed_at": 1_700_000_000.0,
        "producer": "explicit",
    },
    "FacetPinned": {"class": "style", "key": "tone"},
    "FacetUnpinned": {"class": "identity", "key": "name"},
    "FacetForgotten": {"class": "veto", "key": "no.emojis"},
    "FacetUpdated": {"class": "goal", "key": "learn.rust", "value": "yes"},
    "CacheResetRequested": {"reason": "user asked"},
    "RebuildRequested": {"as_of": 1_700_000_000.0, "scope": "periodic"},
    "CacheRebuilt": {
        "as_of": 1_700_000_000.0,
        "added": 1,
        "evicted": 0,
        "kept": 2,
        "total_size": 3,
        "changes": [{"class": "style", "key": "tone", "old_value": None, "new_value": "dry",
                     "old_state": None, "new_state": "active"}],
        "active": [{"class": "style", "key": "tone", "value": "dry", "stability": 0.8,
                    "user_state": "pinned"}],
    },
    "ProfileRendered": {"version": 3, "sha256": "a" * 64, "blocks_changed": ["style"]},
    "ProfileNotesSaved": {"markdown": "# Notes\n", "base_version": 2},
    "ToolRuleUpserted": {"rule_id": "r1", "tool_name": "email.send", "rule": "Sign as Al",
                         "priority": "high", "tags": ["sig"]},
    "ToolRuleDeleted": {"rule_id": "r1", "tool_name": "email.send"},
    "RouteDecided": {"query_id": "q1", "model": "small", "policy": "bandit",
                     "scores": {"small": 0.7, "large": 0.3}},
    "RoutingPolicyUpdated": {"policy": "bandit", "version": 2, "parameters": {"alpha": 0.1}},
    "ExtractionWindowDue": {"source": "conversations", "window_opened_seq": 42},
    "SourceSummarised": {"source": "email", "window_id": "ab" * 32, "kind": "extract",
                         "summary": "Plans the billing migration.", "prompt_version": "extract-v1",
                         "model": "qwen3:8b", "evidence": EVIDENCE, "facets_emitted": 1,
                         "facets_rejected": 0},
    "ReextractionRequested": {"since": 1_700_000_000.0, "prompt_version": "extract-v2"},
    "UserErased": {"reason": "gdpr"},
    "ConnectedAccountSynced": {"toolkit": "gmail", "connection_id": "c1", "label": "a@b.c"},
    "HabitSuggested": {"habit_id": "h1", "when": "mornings", "do": "summarise inbox",
                       "evidence": EVIDENCE},
    "HabitApproved": {"habit_id": "h1"},
    "HabitRejected": {"habit_id": "h1", "reason": "no"},
    "HabitEdited": {"habit_id": "h1", "when": "evenings", "do": "summarise inbox"},
    "HabitRetired": {"habit_id": "h1"},
    "HabitEvidenceAdded": {"habit_id": "h1", "support": [{"ref": "e1", "day": "2026-11-30"}]},
    "HabitActivated": {"habit_id": "h1", "identity": "ab" * 32, "law_hash": "cd" * 32},
    "HabitDisabled": {"habit_id": "h1", "reason": "not now"},
    "HabitEnabled": {"habit_id": "h1", "law_hash": "cd" * 32},
    "HabitDormant": {"habit_id": "h1", "replaced_by": "h2"},
    "HabitSuppressedByLaw": {"habit_id": "h1", "law_hash": "cd" * 32,
                             "patterns": ["bypass_safety"]},
    "HabitMerged": {"habit_id": "h2", "into": "h1"},
    "HabitSuperseded": {"habit_id": "h1", "by": "h2"},
    "HabitDuplicateFound": {"habit_id": "h1", "other_id": "h2", "similarity_bp": 8048,
                            "strong": True},
    "HabitDuplicateResolved": {"habit_id": "h1", "other_id": "h2", "decision": "kept_separate"},
    "HabitLawSet": {"text": "deny: production", "law_hash": "cd" * 32},
    "HabitSettingsChanged": {"retention_days": 14, "scheduled_analyze": True},
    "AdviceIssued": {"analyzed": 10, "problems": 3, "confidence": 0.7, "digest": "ab" * 32,
                     "recommendations": [{"kind": "routing", "summary": "code fails",
                                          "detail": "qwen3:8b failed 3 times",
                                          "evidence_trace_ids": ["t1"]}]},
    "OptimizationRunStarted": {
        "run_id": "r1", "space": {"search": [{"name": "routing.policy", "type": "categorical",
                                              "values": ["heuristic", "learned"]}]},
        "objectives": [{"metric": "reward", "direction": "maximize", "weight": 1}],
        "proposer": "random", "evaluator": "counterfactual", "max_trials": 10, "patience": 3,
        "seed": 7},
    "TrialEvaluated": {"run_id": "r1", "trial_id": "r1-t0", "index": 0,
                       "params": {"routing.policy": "learned"}, "proposer": "random",
                       "metrics": {"reward": 0.7}, "intervals": {"reward": [0.6, 0.8]},
                       "support": 120, "frontier": ["r1-t0"], "best_trial_id": "r1-t0"},
    "OptimizationRunCompleted": {"run_id": "r1", "trials": 4, "best_trial_id": "r1-t0",
                                 "frontier": ["r1-t0"], "stopped_early": True},
    "OptimizationRunStopped": {"run_id": "r1", "reason": "stopped by the tenant"},
    "OptimizationRunFailed": {"run_id": "r1", "error": "the endpoint is gone"},
    "ConfigurationApplied": {"version": 2, "params": {"routing.policy": "learned"},
                             "previous": {"routing.policy": "heuristic"}, "run_id": "r1",
                             "trial_id": "r1-t0"},
}

INGEST_KINDS = {
    "TurnRecorded": "turn",
    "EmailObserved": "email",
    "DocumentIngested": "document",
    "ProviderProfileSynced": "provider_profile",
    "TraceCompleted": "trace",
    "FeedbackGiven": "feedback",
}

# Fields without a default in the v1 ingest contract (by their wire name).
REQUIRED_INGEST_FIELDS: dict[str, list[str]] = {
    "TurnRecorded": ["session_id", "turn_id", "channel", "user_message", "assistant_message",
                     "user_at", "assistant_at"],
    "EmailObserved": ["message_id", "direction", "from", "body", "sent_at"],
    "DocumentIngested": ["source_id", "chunk_id", "text"],
    "ProviderProfileSynced": ["toolkit", "connection_id", "fields"],
    "TraceCompleted": ["trace_id", "query", "agent", "model", "engine", "result", "started_at",
                       "ended_at", "total_tokens", "total_latency_seconds"],
    "FeedbackGiven": ["score"],
}


def envelope(type_name: str, payload: Any, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_id": EVENT_ID,
        "type": type_name,
        "schema_version": 1,
        "tenant_id": TENANT,
        "user_id": USER,
        "occurred_at": 1_700_000_000.25,
        "producer": "tests",
        "payload": payload,
    }
    body.update(over)
    return body


def fields_of(exc: EventValidationError) -> list[str]:
    return [e.field for e in exc.errors]


def decode_error(data: Any, catalog: Catalog = CATALOG) -> EventValidationError:
    with pytest.raises(EventValidationError) as info:
        catalog.decode(data)
    return info.value


# --------------------------------------------------------------------------- catalog shape


def test_every_catalog_type_has_a_sample() -> None:
    assert {s.type for s in CATALOG} == set(SAMPLES)


def test_ingest_types_and_kinds() -> None:
    assert CATALOG.ingest_types() == list(INGEST_KINDS)
    for type_name, kind in INGEST_KINDS.items():
        spec = CATALOG.spec(type_name)
        assert spec.stream == "ingest"
        assert spec.kind == kind


def test_internal_ticks_ride_the_ingest_stream_but_are_not_ingest_types() -> None:
    spec = CATALOG.spec("ExtractionWindowDue")
    assert (spec.stream, spec.kind, spec.internal) == ("ingest", "extraction_due", True)
    assert "ExtractionWindowDue" not in CATALOG.ingest_types()


def test_domain_types_are_on_the_events_stream() -> None:
    for spec in CATALOG:
        if spec.type not in INGEST_KINDS and not spec.internal:
            assert spec.stream == "events", spec.type
            assert spec.kind is None


def test_catalog_type_names_match_payload_classes() -> None:
    for spec in CATALOG:
        assert spec.type == spec.payload.__name__
        assert spec.type in CATALOG


def test_unknown_spec_is_a_type_field_error() -> None:
    with pytest.raises(EventValidationError) as info:
        CATALOG.spec("Nope")
    assert fields_of(info.value) == ["type"]


def test_duplicate_type_in_catalog_is_rejected() -> None:
    spec = CATALOG.spec("UserErased")
    with pytest.raises(ValueError, match="duplicate"):
        Catalog([spec, spec])


def test_ingest_spec_needs_a_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        EventSpec("DocumentIngested", ingest.DocumentIngested, "ingest")


def test_spec_for_unknown_payload_is_type_error() -> None:
    class Stray(Payload):
        x: int

    with pytest.raises(TypeError, match="Stray"):
        CATALOG.spec_for(Stray(x=1))


# --------------------------------------------------------------------------- ingest payloads


@pytest.mark.parametrize("type_name", list(INGEST_KINDS))
def test_ingest_sample_validates(type_name: str) -> None:
    event = CATALOG.decode(envelope(type_name, SAMPLES[type_name]))
    assert event.type == type_name
    assert isinstance(event.payload, CATALOG.spec(type_name).payload)


@pytest.mark.parametrize(
    ("type_name", "field"),
    [(t, f) for t, fs in REQUIRED_INGEST_FIELDS.items() for f in fs],
)
def test_ingest_missing_field_names_payload_field(type_name: str, field: str) -> None:
    payload = copy.deepcopy(SAMPLES[type_name])
    del payload[field]
    err = decode_error(envelope(type_name, payload))
    assert f"payload.{field}" in fields_of(err)


@pytest.mark.parametrize("type_name", list(INGEST_KINDS))
def test_ingest_unknown_payload_field_rejected(type_name: str) -> None:
    payload = {**SAMPLES[type_name], "user_msg": "typo"}
    err = decode_error(envelope(type_name, payload))
    assert "payload.user_msg" in fields_of(err)


def test_tool_call_unknown_field_rejected_with_path() -> None:
    payload = copy.deepcopy(SAMPLES["TurnRecorded"])
    payload["tool_calls"][1]["tool"] = "x"
    err = decode_error(envelope("TurnRecorded", payload))
    assert "payload.tool_calls.1.tool" in fields_of(err)


def test_tool_calls_default_empty() -> None:
    payload = {k: v for k, v in SAMPLES["TurnRecorded"].items() if k != "tool_calls"}
    assert ingest.TurnRecorded.model_validate(payload).tool_calls == []


def test_email_from_alias_and_single_to() -> None:
    payload = {**SAMPLES["EmailObserved"], "to": "solo@example.com"}
    email = ingest.EmailObserved.model_validate(payload)
    assert email.from_ == "me@example.com"
    assert email.to == ["solo@example.com"]
    dumped = email.model_dump(by_alias=True)
    assert dumped["from"] == "me@example.com"
    assert "from_" not in dumped


def test_email_to_list_is_kept() -> None:
    email = ingest.EmailObserved.model_validate(SAMPLES["EmailObserved"])
    assert email.to == ["you@example.com", "them@example.com"]


def test_email_direction_must_be_sent_or_received() -> None:
    err = decode_error(envelope("EmailObserved", {**SAMPLES["EmailObserved"],
                                                  "direction": "forwarded"}))
    assert "payload.direction" in fields_of(err)


def test_email_wire_form_uses_from() -> None:
    event = CATALOG.decode(envelope("EmailObserved", SAMPLES["EmailObserved"]))
    wire = json.loads(event.to_json())
    assert wire["payload"]["from"] == "me@example.com"
    assert "from_" not in wire["payload"]


def test_provider_fields_keep_extras() -> None:
    synced = ingest.ProviderProfileSynced.model_validate(SAMPLES["ProviderProfileSynced"])
    assert synced.fields.timezone == "Europe/Paris"
    assert synced.fields.model_dump()["locale"] == "fr-FR"


@pytest.mark.parametrize(
    "payload",
    [{"turn_id": "t1", "score": 0.5}, {"trace_id": "tr", "score": 0.0},
     {"trace_id": "tr", "turn_id": "t", "score": 1.0}],
)
def test_feedback_with_a_target_is_valid(payload: dict[str, Any]) -> None:
    assert ingest.FeedbackGiven.model_validate(payload).score == payload["score"]


def test_feedback_needs_trace_or_turn() -> None:
    err = decode_error(envelope("FeedbackGiven", {"score": 0.5}))
    assert any(e.field.startswith("payload") and "trace_id or turn_id" in e.reason
               for e in err.errors)


@pytest.mark.parametrize("score", [-0.01, 1.01])
def test_feedback_score_bounds(score: float) -> None:
    err = decode_error(envelope("FeedbackGiven", {"turn_id": "t", "score": score}))
    assert "payload.score" in fields_of(err)


def test_trace_ended_before_started_rejected() -> None:
    payload = {**SAMPLES["TraceCompleted"], "started_at": 10.0, "ended_at": 9.0}
    err = decode_error(envelope("TraceCompleted", payload))
    assert any("ended_at" in e.reason for e in err.errors)
    assert all(e.field.startswith("payload") for e in err.errors)


def test_trace_ended_equal_started_ok() -> None:
    payload = {**SAMPLES["TraceCompleted"], "started_at": 10.0, "ended_at": 10.0}
    assert ingest.TraceCompleted.model_validate(payload).ended_at == 10.0


def test_trace_outcome_literal() -> None:
    err = decode_error(envelope("TraceCompleted", {**SAMPLES["TraceCompleted"],
                                                   "outcome": "great"}))
    assert "payload.outcome" in fields_of(err)


def test_payloads_are_frozen() -> None:
    doc = ingest.DocumentIngested.model_validate(SAMPLES["DocumentIngested"])
    with pytest.raises(ValidationError):
        doc.text = "changed"  # type: ignore[misc]


# --------------------------------------------------------------------------- envelope


def test_envelope_fields_constant() -> None:
    assert set(ENVELOPE_FIELDS) == set(Event.model_fields)


@pytest.mark.parametrize("tenant", ["a.b", "", "a b", "*", "x" * 65])
def test_bad_tenant_id_names_tenant_id(tenant: str) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                tenant_id=tenant))
    assert fields_of(err) == ["tenant_id"]


@pytest.mark.parametrize("user", ["a.b", "", ">"])
def test_bad_user_id_names_user_id(user: str) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"], user_id=user))
    assert fields_of(err) == ["user_id"]


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"event_id": "nope"}, "event_id"),
        ({"occurred_at": -1}, "occurred_at"),
        ({"producer": ""}, "producer"),
        ({"causation_id": "x" * 65}, "causation_id"),
        ({"extra_field": 1}, "extra_field"),
    ],
)
def test_envelope_field_errors(over: dict[str, Any], field: str) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"], **over))
    assert field in fields_of(err)


def test_envelope_missing_event_id() -> None:
    body = envelope("DocumentIngested", SAMPLES["DocumentIngested"])
    del body["event_id"]
    assert "event_id" in fields_of(decode_error(body))


@pytest.mark.parametrize(
    "event_id", [EVENT_ID, EVENT_ID.upper(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"]
)
def test_envelope_accepts_uuid_and_ulid_event_ids(event_id: str) -> None:
    event = CATALOG.decode(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                    event_id=event_id))
    assert event.event_id.lower() == event_id.lower()


@pytest.mark.parametrize(
    "event_id",
    [EVENT_ID + "\n", "01ARZ3NDEKTSV4RRFFQ69G5FAV\n", EVENT_ID.replace("-", ""),
     "01ARZ3NDEKTSV4RRFFQ69G5FAI", 12345],
)
def test_envelope_rejects_malformed_event_ids(event_id: object) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                event_id=event_id))
    assert fields_of(err) == ["event_id"]


@pytest.mark.parametrize(("field", "value"), [("tenant_id", "acme\n"), ("user_id", "u1\n")])
def test_envelope_rejects_ids_with_trailing_newline(field: str, value: str) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                **{field: value}))
    assert fields_of(err) == [field]


def test_envelope_dict_excludes_payload() -> None:
    event = CATALOG.decode(envelope("DocumentIngested", SAMPLES["DocumentIngested"]))
    env = event.envelope_dict()
    assert "payload" not in env
    assert env["tenant_id"] == TENANT and env["event_id"] == EVENT_ID
    assert set(env) == set(ENVELOPE_FIELDS) - {"payload"}


def test_new_fills_envelope() -> None:
    payload = ingest.DocumentIngested.model_validate(SAMPLES["DocumentIngested"])
    event = CATALOG.new(payload, tenant_id=TENANT, user_id=USER, producer="p",
                        occurred_at=5.0, causation_id="c", correlation_id="r")
    assert event.type == "DocumentIngested"
    assert event.schema_version == 1
    assert event.occurred_at == 5.0
    assert event.causation_id == "c" and event.correlation_id == "r"
    assert event.payload == payload
    other = CATALOG.new(payload, tenant_id=TENANT, user_id=USER, producer="p")
    assert other.event_id != event.event_id
    assert other.occurred_at > 1_600_000_000


def test_new_with_bad_tenant_raises_event_validation_error() -> None:
    payload = ingest.DocumentIngested.model_validate(SAMPLES["DocumentIngested"])
    with pytest.raises(EventValidationError) as info:
        CATALOG.new(payload, tenant_id="a.b", user_id=USER, producer="p")
    assert fields_of(info.value) == ["tenant_id"]


def test_event_is_frozen() -> None:
    event = CATALOG.decode(envelope("DocumentIngested", SAMPLES["DocumentIngested"]))
    with pytest.raises(ValidationError):
        event.tenant_id = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- decode errors


@pytest.mark.parametrize("data", [b"not json", "{", b"\xff\xfe", ""])
def test_decode_not_json_is_body(data: bytes | str) -> None:
    err = decode_error(data)
    assert fields_of(err) == ["body"]


@pytest.mark.parametrize("data", [b"[]", b"1", b"null", "\"s\""])
def test_decode_non_object_is_body(data: bytes | str) -> None:
    assert fields_of(decode_error(data)) == ["body"]


def test_decode_unknown_type_is_type() -> None:
    err = decode_error(envelope("NoSuchThing", {}))
    assert fields_of(err) == ["type"]
    assert "NoSuchThing" in err.errors[0].reason


@pytest.mark.parametrize("type_value", [None, 3, ["TurnRecorded"]])
def test_decode_missing_or_non_string_type(type_value: Any) -> None:
    body = envelope("DocumentIngested", SAMPLES["DocumentIngested"])
    body["type"] = type_value
    assert fields_of(decode_error(body)) == ["type"]


def test_decode_newer_schema_version() -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                schema_version=2))
    assert fields_of(err) == ["schema_version"]
    assert "newer" in err.errors[0].reason


@pytest.mark.parametrize("version", [0, -1, "1", 1.0, True, None])
def test_decode_bad_schema_version(version: Any) -> None:
    err = decode_error(envelope("DocumentIngested", SAMPLES["DocumentIngested"],
                                schema_version=version))
    assert fields_of(err) == ["schema_version"]


@pytest.mark.parametrize("payload", [None, [], "x"])
def test_decode_payload_not_object(payload: Any) -> None:
    assert fields_of(decode_error(envelope("DocumentIngested", payload))) == ["payload"]


def test_decode_collects_several_errors() -> None:
    err = decode_error(envelope("DocumentIngested", {"source_id": ""}, user_id="a.b"))
    fields = fields_of(err)
    assert {"user_id", "payload.source_id", "payload.chunk_id", "payload.text"} <= set(fields)
    assert "payload.text" in str(err)


def test_field_error_as_dict() -> None:
    assert FieldError("payload.x", "bad").as_dict() == {"field": "payload.x", "reason": "bad"}


def test_decode_accepts_bytes_str_and_mapping() -> None:
    body = envelope("DocumentIngested", SAMPLES["DocumentIngested"])
    a = CATALOG.decode(body)
    b = CATALOG.decode(json.dumps(body))
    c = CATALOG.decode(json.dumps(body).encode())
    assert a == b == c


def test_decode_without_schema_version_defaults_to_v1() -> None:
    body = envelope("DocumentIngested", SAMPLES["DocumentIngested"])
    del body["schema_version"]
    assert CATALOG.decode(body).schema_version == 1


# --------------------------------------------------------------------------- upcasting


class Widget(Payload):
    """v3: `title` (renamed from v1 `name`, v2 `label`), `size_cm` (v1 had `size_mm`)."""

    title: str
    size_cm: float
    tags: list[str] = []


def _v1_to_v2(p: dict[str, Any]) -> dict[str, Any]:
    p["label"] = p.pop("name")
    p["size_cm"] = p.pop("size_mm") / 10
    return p


def _v2_to_v3(p: dict[str, Any]) -> dict[str, Any]:
    p["title"] = p.pop("label").upper()
    return p


WIDGET_SPEC = EventSpec("Widget", Widget, "events", version=3,
                        upcasters={1: _v1_to_v2, 2: _v2_to_v3})
WIDGETS = Catalog([WIDGET_SPEC])


def test_upcast_v1_to_v3() -> None:
    body = envelope("Widget", {"name": "bolt", "size_mm": 25}, schema_version=1)
    original = copy.deepcopy(body)
    event = WIDGETS.decode(json.dumps(body))
    assert event.schema_version == 3
    assert event.payload == Widget(title="BOLT", size_cm=2.5)
    # the input mapping is not mutated by upcasting
    WIDGETS.decode(body)
    assert body == original


def test_upcast_v2_to_v3_runs_only_the_last_step() -> None:
    event = WIDGETS.decode(envelope("Widget", {"label": "nut", "size_cm": 1.0},
                                    schema_version=2))
    assert event.schema_version == 3
    assert event.payload == Widget(title="NUT", size_cm=1.0)


def test_upcast_missing_version_means_v1() -> None:
    body = envelope("Widget", {"name": "gear", "size_mm": 100})
    del body["schema_version"]
    event = WIDGETS.decode(body)
    assert event.schema_version == 3
    assert event.payload.title == "GEAR"


def test_current_version_is_not_upcast() -> None:
    event = WIDGETS.decode(envelope("Widget", {"title": "as-is", "size_cm": 3},
                                    schema_version=3))
    assert event.payload.title == "as-is"


def test_upcast_then_validate_names_payload_field() -> None:
    # v1 payload that upcasts fine but has an unknown field left over
    err = decode_error(envelope("Widget", {"name": "x", "size_mm": 1, "colour": "red"}),
                       WIDGETS)
    assert "payload.colour" in fields_of(err)


def test_newer_than_reader_with_upcasters() -> None:
    err = decode_error(envelope("Widget", {"title": "x", "size_cm": 1}, schema_version=4),
                       WIDGETS)
    assert fields_of(err) == ["schema_version"]


def test_upcast_round_trip_at_current_version() -> None:
    event = WIDGETS.decode(envelope("Widget", {"name": "bolt", "size_mm": 25}))
    again = WIDGETS.decode(event.to_json())
    assert again == event


def test_new_stamps_current_version() -> None:
    event = WIDGETS.new(Widget(title="t", size_cm=1), tenant_id=TENANT, user_id=USER,
                        producer="p")
    assert event.schema_version == 3
    assert WIDGETS.subject(event) == f"habitus.v1.event.Widget.{TENANT}.{USER}"


@pytest.mark.parametrize("upcasters", [{}, {1: _v1_to_v2}, {2: _v2_to_v3}])
def test_missing_upcaster_raises_at_construction(upcasters: dict[int, Any]) -> None:
    with pytest.raises(ValueError, match="upcaster"):
        EventSpec("Widget", Widget, "events", version=3, upcasters=upcasters)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("type_name", list(SAMPLES))
def test_round_trip_every_catalog_type(type_name: str) -> None:
    spec = CATALOG.spec(type_name)
    payload = spec.payload.model_validate(SAMPLES[type_name])
    event = CATALOG.new(payload, tenant_id=TENANT, user_id=USER, producer="tests",
                        occurred_at=1_700_000_000.125, causation_id="cause",
                        correlation_id="corr")
    decoded = CATALOG.decode(event.to_json())
    assert decoded == event
    assert decoded.payload == payload
    # the wire form is itself stable
    assert decoded.to_json() == event.to_json()


@pytest.mark.parametrize("type_name", list(SAMPLES))
def test_decode_sample_from_wire_json(type_name: str) -> None:
    event = CATALOG.decode(json.dumps(envelope(type_name, SAMPLES[type_name])))
    assert event.type == type_name
    assert event.tenant_id == TENANT and event.user_id == USER


@pytest.mark.parametrize("type_name", list(SAMPLES))
def test_subject_for_every_type(type_name: str) -> None:
    event = CATALOG.decode(envelope(type_name, SAMPLES[type_name]))
    subject = CATALOG.subject(event)
    if type_name in INGEST_KINDS:
        assert subject == f"habitus.v1.ingest.{INGEST_KINDS[type_name]}.{TENANT}.{USER}"
    elif CATALOG.spec(type_name).internal:
        assert subject == f"habitus.v1.ingest.{CATALOG.spec(type_name).kind}.{TENANT}.{USER}"
    else:
        assert subject == f"habitus.v1.event.{type_name}.{TENANT}.{USER}"


@pytest.mark.parametrize("where", ["occurred_at", "payload.user_at"])
def test_infinite_floats_rejected_or_round_trip(where: str) -> None:
    body = envelope("TurnRecorded", copy.deepcopy(SAMPLES["TurnRecorded"]))
    if where == "occurred_at":
        body["occurred_at"] = math.inf
    else:
        body["payload"]["user_at"] = math.inf
    try:
        event = CATALOG.decode(json.dumps(body))
    except EventValidationError:
        return  # rejecting inf at the edge is acceptable
    assert CATALOG.decode(event.to_json()) == event


# --------------------------------------------------------------------------- domain payloads


def test_candidate_class_alias() -> None:
    cand = domain.CandidateEmitted.model_validate(SAMPLES["CandidateEmitted"])
    assert cand.class_ is domain.FacetClass.STYLE
    assert cand.model_dump(by_alias=True, mode="json")["class"] == "style"


@pytest.mark.parametrize("key", ["", " lead", "/abs", "has space", "x" * 201])
def test_facet_key_pattern(key: str) -> None:
    err = decode_error(envelope("FacetPinned", {"class": "style", "key": key}))
    assert "payload.key" in fields_of(err)


def test_candidate_confidence_bounds() -> None:
    err = decode_error(envelope("CandidateEmitted", {**SAMPLES["CandidateEmitted"],
                                                     "initial_confidence": 1.5}))
    assert "payload.initial_confidence" in fields_of(err)


def test_profile_rendered_sha_pattern() -> None:
    err = decode_error(envelope("ProfileRendered", {"version": 1, "sha256": "A" * 64}))
    assert "payload.sha256" in fields_of(err)


def test_unknown_facet_class_rejected() -> None:
    err = decode_error(envelope("FacetPinned", {"class": "mood", "key": "k"}))
    assert "payload.class" in fields_of(err)


# --------------------------------------------------------------------------- evidence


EVIDENCE_SAMPLES = [
    (TurnRef, {"type": "turn", "session_id": "s", "turn_id": "t"}),
    (TurnWindowRef, {"type": "turn_window", "session_id": "s", "from_turn_id": "a",
                     "to_turn_id": "b"}),
    (EmailMessageRef, {"type": "email_message", "message_id": "m"}),
    (DocumentChunkRef, {"type": "document_chunk", "source_id": "s", "chunk_id": "c"}),
    (ProviderRef, {"type": "provider", "toolkit": "g", "connection_id": "c", "field": "email"}),
    (ToolCallRef, {"type": "tool_call", "tool_name": "x", "turn_id": "t"}),
    (SourceSummaryRef, {"type": "source_summary", "summary_id": "s"}),
    (AgentTraceRef, {"type": "trace", "trace_id": "tr"}),
]

_REF = TypeAdapter(EvidenceRef)
_REFS = TypeAdapter(list[EvidenceRef])


@pytest.mark.parametrize(("cls", "data"), EVIDENCE_SAMPLES)
def test_evidence_ref_round_trip(cls: type[Payload], data: dict[str, Any]) -> None:
    ref = _REF.validate_python(data)
    assert type(ref) is cls
    assert _REF.dump_python(ref, mode="json") == data
    assert _REF.validate_json(_REF.dump_json(ref)) == ref


def test_evidence_list_round_trip_inside_an_event() -> None:
    refs = [d for _, d in EVIDENCE_SAMPLES]
    parsed = _REFS.validate_python(refs)
    assert [type(r) for r in parsed] == [c for c, _ in EVIDENCE_SAMPLES]
    payload = {**SAMPLES["HabitSuggested"], "evidence": refs}
    event = CATALOG.decode(envelope("HabitSuggested", payload))
    assert [type(r) for r in event.payload.evidence] == [c for c, _ in EVIDENCE_SAMPLES]
    assert json.loads(event.to_json())["payload"]["evidence"] == refs
    assert CATALOG.decode(event.to_json()) == event


@pytest.mark.parametrize(
    "data",
    [
        {"type": "unknown", "x": 1},
        {"session_id": "s", "turn_id": "t"},  # no tag
        {"type": "turn", "session_id": "s"},  # missing field
        {"type": "trace", "trace_id": "t", "extra": 1},
    ],
)
def test_evidence_ref_rejects(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _REF.validate_python(data)


def test_evidence_bad_ref_in_event_names_the_path() -> None:
    payload = {**SAMPLES["CandidateEmitted"], "evidence": [{"type": "turn", "session_id": "s"}]}
    err = decode_error(envelope("CandidateEmitted", payload))
    assert any(f.startswith("payload.evidence.0") for f in fields_of(err))


# --------------------------------------------------------------------------- decode_message


def _headers(type_name: str, version: int | str) -> dict[str, str]:
    from habitus.events.catalog import TYPE_HEADER, VERSION_HEADER

    return {TYPE_HEADER: type_name, VERSION_HEADER: str(version)}


@pytest.mark.parametrize("type_name", list(SAMPLES))
def test_decode_message_fast_path_equals_decode(type_name: str) -> None:
    data = json.dumps(envelope(type_name, SAMPLES[type_name])).encode()
    fast = CATALOG.decode_message(data, _headers(type_name, 1))
    assert fast == CATALOG.decode(data)
    assert type(fast.payload) is CATALOG.spec(type_name).payload


@pytest.mark.parametrize("headers", [None, {}, {"Other": "x"}])
def test_decode_message_without_headers(headers: dict[str, str] | None) -> None:
    data = json.dumps(envelope("DocumentIngested", SAMPLES["DocumentIngested"])).encode()
    assert CATALOG.decode_message(data, headers) == CATALOG.decode(data)


def test_decode_message_header_type_disagrees_with_body() -> None:
    # HabitRetired's payload also validates as HabitApproved: the body's type must win.
    data = json.dumps(envelope("HabitRetired", {"habit_id": "h1"})).encode()
    event = CATALOG.decode_message(data, _headers("HabitApproved", 1))
    assert event.type == "HabitRetired"
    assert type(event.payload) is domain.HabitRetired


def test_decode_message_old_body_with_current_version_header_is_upcast() -> None:
    data = json.dumps(envelope("Widget", {"name": "bolt", "size_mm": 25},
                               schema_version=1)).encode()
    event = WIDGETS.decode_message(data, _headers("Widget", 3))
    assert event.schema_version == 3
    assert event.payload == Widget(title="BOLT", size_cm=2.5)


def test_decode_message_old_version_header_upcasts() -> None:
    data = json.dumps(envelope("Widget", {"name": "nut", "size_mm": 10})).encode()
    assert WIDGETS.decode_message(data, _headers("Widget", 1)).payload.title == "NUT"


def test_decode_message_invalid_body_reports_fields() -> None:
    data = json.dumps(envelope("DocumentIngested", {"source_id": "s"},
                               tenant_id="a.b")).encode()
    with pytest.raises(EventValidationError) as info:
        CATALOG.decode_message(data, _headers("DocumentIngested", 1))
    assert {"tenant_id", "payload.chunk_id", "payload.text"} <= set(fields_of(info.value))


def test_decode_message_not_json_is_body() -> None:
    with pytest.raises(EventValidationError) as info:
        CATALOG.decode_message(b"nope", _headers("DocumentIngested", 1))
    assert fields_of(info.value) == ["body"]
