"""Producer 1, provider profiles (services/producers/provider.py): vectors from issue 4."""

from __future__ import annotations

from habitus.events.ingest import ProviderProfileSynced
from services.producers.provider import CONFIDENCE, provider_candidates
from tests.unit.test_producers_candidates import assert_valid, by_key, facets


def _profile(**fields: object) -> ProviderProfileSynced:
    return ProviderProfileSynced.model_validate(
        {"toolkit": "gmail", "connection_id": "conn-1", "fields": fields}
    )


def test_name_email_timezone_give_three_identity_candidates() -> None:
    p = _profile(name="Alice Johnson", email="alice@acme.com", timezone="America/Los_Angeles")
    out = assert_valid(provider_candidates(p, observed_at=1_700_000_000.0))
    assert facets(out) == [
        ("identity", "name", "Alice Johnson"),
        ("identity", "email", "alice@acme.com"),
        ("identity", "timezone", "America/Los_Angeles"),
    ]
    for c in out:
        assert c.cue_family == "authoritative"  # the account holder's own data
        assert c.confidence == CONFIDENCE
        assert c.producer == "provider_profile"
        assert c.observed_at == 1_700_000_000.0
        assert c.evidence == (
            {"type": "provider", "toolkit": "gmail", "connection_id": "conn-1", "field": c.key},
        )


def test_empty_and_blank_fields_are_skipped() -> None:
    p = _profile(name="  ", email="", timezone=None, role="Staff Engineer")
    out = assert_valid(provider_candidates(p, observed_at=1.0))
    assert facets(out) == [("identity", "role", "engineer")]


def test_no_fields_no_candidates() -> None:
    assert provider_candidates(_profile(), observed_at=1.0) == []


def test_role_and_employer_are_read() -> None:
    p = _profile(role="CTO", employer="Acme Corp")
    out = by_key(assert_valid(provider_candidates(p, observed_at=1.0)))
    assert out["role"].value == "cto"
    assert out["employer"].value == "Acme Corp"


def test_unknown_extra_fields_are_ignored() -> None:
    p = _profile(name="Bob", avatar_url="https://x/y.png", locale="en-US", org_id=42)
    out = assert_valid(provider_candidates(p, observed_at=1.0))
    assert facets(out) == [("identity", "name", "Bob")]


def test_values_are_stripped_and_email_case_folded() -> None:
    p = _profile(name="  Alice \n Johnson ", email=" Alice@Acme.COM ")
    out = by_key(assert_valid(provider_candidates(p, observed_at=1.0)))
    assert out["name"].value == "Alice Johnson"
    assert out["email"].value == "alice@acme.com"


def test_a_value_too_long_for_a_facet_is_skipped() -> None:
    p = _profile(name="A" * 2001, email="a@b.co")
    out = assert_valid(provider_candidates(p, observed_at=1.0))
    assert [c.key for c in out] == ["email"]


def test_role_and_employer_stay_structural_evidence() -> None:
    p = _profile(role="Staff Engineer", employer="Acme")
    out = assert_valid(provider_candidates(p, observed_at=1.0))
    assert {c.key: c.cue_family for c in out} == {"role": "structural", "employer": "structural"}
