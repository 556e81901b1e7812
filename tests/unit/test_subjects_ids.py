"""Identifiers and subjects: the closed id alphabet and the one spelling of every subject."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from habitus.ids import (
    ID_RE,
    check_event_id,
    check_id,
    derived_event_id,
    new_event_id,
)
from habitus.subjects import (
    DLQ_ROOT,
    EVENT_ROOT,
    INGEST_ROOT,
    RPC_ROOT,
    SLOTS,
    ParsedSubject,
    _fnv1a,
    dlq_subject,
    event_subject,
    ingest_subject,
    parse_subject,
    published_filter,
    rpc_method,
    rpc_subject,
    slot_of,
    tenant_slot_of,
    user_filter,
)

valid_ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
kinds = st.from_regex(r"[a-z][a-z_]{0,30}", fullmatch=True)
type_names = st.from_regex(r"[A-Z][A-Za-z0-9]{1,40}", fullmatch=True)

BAD_IDS = [
    "",
    "a" * 65,
    "a.b",
    "a b",
    " a",
    "a*",
    "*",
    ">",
    "a>",
    "a\tb",
    "a/b",
    "a:b",
    "é",
    "a\u00a0",
]


# --------------------------------------------------------------------------- check_id


@pytest.mark.parametrize("value", ["a", "A", "0", "_", "-", "acme-corp_01", "a" * 64, "Z9-_z"])
def test_check_id_accepts_the_alphabet(value: str) -> None:
    assert check_id(value) == value


@pytest.mark.parametrize("value", BAD_IDS)
def test_check_id_rejects_outside_the_alphabet(value: str) -> None:
    with pytest.raises(ValueError):
        check_id(value)


@pytest.mark.parametrize("value", [None, 123, b"abc", ["a"]])
def test_check_id_rejects_non_strings(value: object) -> None:
    with pytest.raises(ValueError):
        check_id(value)  # type: ignore[arg-type]


def test_check_id_error_names_the_field() -> None:
    with pytest.raises(ValueError, match="tenant_id"):
        check_id("a.b", "tenant_id")
    with pytest.raises(ValueError, match="user_id"):
        check_id("", "user_id")


def test_check_id_length_boundary() -> None:
    assert check_id("x" * 64) == "x" * 64
    with pytest.raises(ValueError):
        check_id("x" * 65)


@pytest.mark.parametrize("value", ["acme\n", "u1\n"])
def test_check_id_rejects_trailing_newline(value: str) -> None:
    with pytest.raises(ValueError):
        check_id(value)


@given(valid_ids)
def test_check_id_accepts_every_valid_id(value: str) -> None:
    assert check_id(value) == value


@given(st.text(min_size=1, max_size=70))
def test_check_id_agrees_with_a_fullmatch_of_the_alphabet(value: str) -> None:
    expected = re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value) is not None
    if value.endswith("\n"):
        return
    try:
        check_id(value)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == expected


def test_id_re_pattern_is_the_documented_alphabet() -> None:
    assert ID_RE.pattern.strip("^$") == "[A-Za-z0-9_-]{1,64}"


# --------------------------------------------------------------------------- event ids


def test_check_event_id_lowercases_uuid() -> None:
    u = "0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"
    assert check_event_id(u) == u.lower()


def test_check_event_id_keeps_canonical_uuid() -> None:
    u = str(uuid.uuid4())
    assert check_event_id(u) == u


def test_check_event_id_uppercases_ulid() -> None:
    ulid = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    assert check_event_id(ulid.lower()) == ulid
    assert check_event_id(ulid) == ulid


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not-an-id",
        "0190a1b2c3d47e5f8a9b0c1d2e3f4a5b",  # uuid without dashes
        "{0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b}",
        "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5",  # one short
        "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5bb",  # one long
        "01ARZ3NDEKTSV4RRFFQ69G5FA",  # 25 chars
        "01ARZ3NDEKTSV4RRFFQ69G5FAVV",  # 27 chars
        "01ARZ3NDEKTSV4RRFFQ69G5FAI",  # I is not Crockford base32
        "01ARZ3NDEKTSV4RRFFQ69G5FAU",  # U is not Crockford base32
        "g190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    ],
)
def test_check_event_id_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        check_event_id(value)


@pytest.mark.parametrize("value", [None, 1, b"01ARZ3NDEKTSV4RRFFQ69G5FAV"])
def test_check_event_id_rejects_non_strings(value: object) -> None:
    with pytest.raises(ValueError):
        check_event_id(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", ["0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b\n", "01ARZ3NDEKTSV4RRFFQ69G5FAV\n"]
)
def test_check_event_id_rejects_trailing_newline(value: str) -> None:
    with pytest.raises(ValueError):
        check_event_id(value)


def test_check_event_id_rejects_overflowing_ulid() -> None:
    with pytest.raises(ValueError):
        check_event_id("8" + "0" * 25)


def test_new_event_id_is_a_uuid7_and_valid() -> None:
    ids = {new_event_id() for _ in range(200)}
    assert len(ids) == 200
    for eid in ids:
        assert uuid.UUID(eid).version == 7
        assert check_event_id(eid) == eid


def test_new_event_ids_sort_by_creation() -> None:
    ids = [new_event_id() for _ in range(50)]
    assert ids == sorted(ids)


def test_derived_event_id_is_deterministic_and_valid() -> None:
    a = derived_event_id("evt-1", "style", "tone")
    assert a == derived_event_id("evt-1", "style", "tone")
    assert uuid.UUID(a).version == 5
    assert check_event_id(a) == a


def test_derived_event_id_distinct_per_parts() -> None:
    seen = {
        derived_event_id("a"),
        derived_event_id("a", "b"),
        derived_event_id("b", "a"),
        derived_event_id("ab"),
        derived_event_id("a", "b", "c"),
        derived_event_id("a", "bc"),
        derived_event_id("ab", "c"),
        derived_event_id("a", ""),
    }
    assert len(seen) == 8


@given(st.lists(valid_ids, min_size=1, max_size=4), st.lists(valid_ids, min_size=1, max_size=4))
def test_derived_event_id_distinct_for_distinct_id_tuples(a: list[str], b: list[str]) -> None:
    if a == b:
        assert derived_event_id(*a) == derived_event_id(*b)
    else:
        assert derived_event_id(*a) != derived_event_id(*b)


def test_derived_event_id_unambiguous_when_a_part_holds_the_separator() -> None:
    assert derived_event_id("a", "b\x1fc") != derived_event_id("a\x1fb", "c")


# --------------------------------------------------------------------------- subjects


def test_subject_builders_spell_subjects() -> None:
    assert ingest_subject("turn", "acme", "u1") == "habitus.v1.ingest.turn.acme.u1"
    assert event_subject("CandidateEmitted", "acme", "u1") == (
        "habitus.v1.event.CandidateEmitted.acme.u1"
    )
    assert dlq_subject("learning", "acme", "u1") == "habitus.v1.dlq.learning.acme.u1"
    assert rpc_subject("learning.pin_facet") == "habitus.rpc.learning.pin_facet"
    assert INGEST_ROOT == "habitus.v1.ingest"
    assert EVENT_ROOT == "habitus.v1.event"
    assert DLQ_ROOT == "habitus.v1.dlq"
    assert RPC_ROOT == "habitus.rpc"


@given(kinds, valid_ids, valid_ids)
def test_ingest_subject_round_trip(kind: str, tenant: str, user: str) -> None:
    assert parse_subject(ingest_subject(kind, tenant, user)) == ParsedSubject(
        "ingest", kind, tenant, user
    )


@given(type_names, valid_ids, valid_ids)
def test_event_subject_round_trip(type_name: str, tenant: str, user: str) -> None:
    assert parse_subject(event_subject(type_name, tenant, user)) == ParsedSubject(
        "event", type_name, tenant, user
    )


@given(kinds, valid_ids, valid_ids)
def test_dlq_subject_round_trip(consumer: str, tenant: str, user: str) -> None:
    assert parse_subject(dlq_subject(consumer, tenant, user)) == ParsedSubject(
        "dlq", consumer, tenant, user
    )


@pytest.mark.parametrize("builder", [ingest_subject, event_subject])
@pytest.mark.parametrize(
    ("tenant", "user", "field"),
    [("a.b", "u", "tenant_id"), ("t", "u*", "user_id"), ("", "u", "tenant_id"),
     ("t", ">", "user_id"), ("t", "a b", "user_id")],
)
def test_builders_reject_bad_ids(builder, tenant: str, user: str, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=field):
        builder("Turn", tenant, user)


@pytest.mark.parametrize("builder", [ingest_subject, event_subject, dlq_subject])
@pytest.mark.parametrize("name", ["", "a.b", "a b", "*", ">", "a\tb", "a\nb"])
def test_builders_reject_bad_name_tokens(builder, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        builder(name, "t", "u")


@pytest.mark.parametrize(
    ("tenant", "user", "expected"),
    [
        ("a.b", "u1", "habitus.v1.dlq.c._invalid.u1"),
        ("acme", "*", "habitus.v1.dlq.c.acme._invalid"),
        ("", "", "habitus.v1.dlq.c._invalid._invalid"),
        ("a b", ">", "habitus.v1.dlq.c._invalid._invalid"),
    ],
)
def test_dlq_subject_tolerates_invalid_ids(tenant: str, user: str, expected: str) -> None:
    subject = dlq_subject("c", tenant, user)
    assert subject == expected
    parsed = parse_subject(subject)
    assert parsed.family == "dlq"
    assert parsed.name == "c"


def test_dlq_subject_still_rejects_a_bad_consumer_name() -> None:
    with pytest.raises(ValueError, match="consumer"):
        dlq_subject("a.b", "t", "u")


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "habitus",
        "habitus.v1.ingest.turn.acme",  # 5 tokens
        "habitus.v1.ingest.turn.acme.u1.extra",  # 7 tokens
        "other.v1.ingest.turn.acme.u1",
        "habitus.v2.ingest.turn.acme.u1",
        "habitus.v1.rpc.turn.acme.u1",
        "habitus.rpc.learning.pin_facet",
    ],
)
def test_parse_subject_rejects(subject: str) -> None:
    with pytest.raises(ValueError):
        parse_subject(subject)


@pytest.mark.parametrize(
    "method", ["learning.pin_facet", "ping", "a.b.c", "tools.put_rule", "A1_b.c2"]
)
def test_rpc_subject_accepts_dotted_words(method: str) -> None:
    subject = rpc_subject(method)
    assert subject == f"habitus.rpc.{method}"
    assert rpc_method(subject) == method


@pytest.mark.parametrize(
    "method",
    ["", ".", "a.", ".a", "a..b", "a b", "a.*", "a.>", "a-b", "a/b", "a.b\n", "a\tb", "_"],
)
def test_rpc_subject_rejects(method: str) -> None:
    with pytest.raises(ValueError, match="rpc method"):
        rpc_subject(method)


@pytest.mark.parametrize("method", ["learning.pïn", "a.b²", "ünïcode"])
def test_rpc_subject_rejects_non_ascii(method: str) -> None:
    with pytest.raises(ValueError):
        rpc_subject(method)


def test_rpc_method_rejects_non_rpc_subjects() -> None:
    with pytest.raises(ValueError):
        rpc_method("habitus.v1.event.X.t.u")
    with pytest.raises(ValueError):
        rpc_method("habitus.rpc")


def test_user_filter() -> None:
    assert user_filter(EVENT_ROOT, "*", "acme", "u1") == "habitus.v1.event.*.acme.u1.*.*"
    assert user_filter(INGEST_ROOT, "turn") == "habitus.v1.ingest.turn.*.*.*.*"
    assert published_filter(EVENT_ROOT, "*", "acme", "u1") == "habitus.v1.event.*.acme.u1"


def test_a_stored_subject_parses_with_its_slots_and_gives_back_the_published_one() -> None:
    parsed = parse_subject("habitus.v1.event.CacheRebuilt.acme.alice.13.4")
    assert (parsed.tenant_id, parsed.user_id, parsed.user_slot, parsed.tenant_slot) == (
        "acme", "alice", 13, 4)
    assert parsed.published == "habitus.v1.event.CacheRebuilt.acme.alice"
    assert parse_subject(parsed.published).user_slot is None
    for bad in ("habitus.v1.event.T.a.b.1", "habitus.v1.event.T.a.b.x.2",
                "habitus.v1.event.T.a.b.1.2.3"):
        with pytest.raises(ValueError):
            parse_subject(bad)


def test_slots_are_fnv1a_of_the_tokens_joined_as_they_are() -> None:
    # the reference values of 32-bit FNV-1a; the server's own partitioning is checked against
    # slot_of in tests/integration/test_partitions.py
    assert _fnv1a(b"") == 0x811C9DC5
    assert _fnv1a(b"a") == 0xE40C292C
    assert _fnv1a(b"foobar") == 0xBF9CF968
    assert slot_of("acme", "alice") == _fnv1a(b"acmealice") % SLOTS
    assert tenant_slot_of("acme") == _fnv1a(b"acme") % SLOTS


@given(st.lists(st.text(max_size=40), min_size=1, max_size=6))
def test_derived_event_id_is_exactly_uuid5_of_the_json_parts(parts: list[str]) -> None:
    """The ids are stored and compared across versions: the formatting done by hand must be
    `uuid.uuid5` bit for bit (version and variant bits included)."""
    import json

    from habitus.ids import _DERIVED_NS

    expected = str(uuid.uuid5(_DERIVED_NS, json.dumps(tuple(parts))))
    assert derived_event_id(*parts) == expected
