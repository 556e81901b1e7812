"""The shared candidate value (services/producers/candidates.py) and the contract check every
producer test runs on what it gets back: a candidate the wiring could not publish as a valid
`CandidateEmitted` is a bug in the producer, not in the wiring."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from pydantic import TypeAdapter

from habitus.events.domain import CandidateEmitted, CueFamily, FacetClass
from habitus.events.evidence import EvidenceRef
from services.producers.candidates import (
    CORRECTION_REPEAT,
    EDIT_WINDOW,
    EMAIL_SIGNATURE,
    EXPLICIT_STATEMENT,
    LENGTH_RATIO,
    PROVIDER_PROFILE,
    REFLECTION,
    Candidate,
    is_valid_key,
    slugify,
    squash_spaces,
)

_EVIDENCE = TypeAdapter(list[EvidenceRef])
PRODUCERS = {
    PROVIDER_PROFILE,
    EMAIL_SIGNATURE,
    LENGTH_RATIO,
    EDIT_WINDOW,
    CORRECTION_REPEAT,
    REFLECTION,
    EXPLICIT_STATEMENT,
}


def assert_valid(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Every candidate parses as a `CandidateEmitted` and its evidence as `EvidenceRef`s."""
    out = list(candidates)
    for c in out:
        assert isinstance(c, Candidate)
        refs = _EVIDENCE.validate_python(list(c.evidence))
        assert refs, f"{c} has no evidence"
        assert [r.model_dump(mode="json") for r in refs] == [dict(e) for e in c.evidence]
        payload = CandidateEmitted.model_validate(
            {
                "class": c.facet_class,
                "key": c.key,
                "value": c.value,
                "cue_family": c.cue_family,
                "evidence": list(c.evidence),
                "initial_confidence": c.confidence,
                "observed_at": c.observed_at,
                "producer": c.producer,
            }
        )
        assert payload.class_ == FacetClass(c.facet_class)
        assert payload.cue_family == CueFamily(c.cue_family)
        assert CandidateEmitted.model_validate(c.as_payload()) == payload
        assert c.producer in PRODUCERS
        assert is_valid_key(c.key)
        assert "/" not in c.key[:1] and not any(ch.isspace() for ch in c.key)
    return out


def facets(candidates: Iterable[Candidate]) -> list[tuple[str, str, str]]:
    """(class, key, value) triples, in emission order."""
    return [(c.facet_class, c.key, c.value) for c in candidates]


def by_key(candidates: Iterable[Candidate]) -> dict[str, Candidate]:
    return {c.key: c for c in candidates}


def _candidate(**overrides: Any) -> Candidate:
    values: dict[str, Any] = {
        "facet_class": "style",
        "key": "verbosity",
        "value": "terse",
        "cue_family": "behavioral",
        "confidence": 0.7,
        "evidence": ({"type": "turn", "session_id": "s1", "turn_id": "t1"},),
        "observed_at": 100.0,
        "producer": EDIT_WINDOW,
    }
    values.update(overrides)
    return Candidate(**values)


def test_candidate_is_frozen_and_valid() -> None:
    c = _candidate()
    with pytest.raises(AttributeError):
        c.key = "other"  # type: ignore[misc]
    assert_valid([c])


def test_as_payload_uses_the_class_alias() -> None:
    payload = _candidate().as_payload()
    assert payload["class"] == "style"
    assert payload["initial_confidence"] == 0.7
    assert payload["evidence"] == [{"type": "turn", "session_id": "s1", "turn_id": "t1"}]


def test_event_id_is_deterministic_per_ingest_event_and_facet() -> None:
    c = _candidate()
    ingest = "0190f2a4-0000-7000-8000-000000000001"
    assert c.event_id(ingest) == _candidate().event_id(ingest)
    assert c.event_id(ingest) != c.event_id("0190f2a4-0000-7000-8000-000000000002")
    assert c.event_id(ingest) != _candidate(value="detailed").event_id(ingest)
    assert c.event_id(ingest) != _candidate(producer=CORRECTION_REPEAT).event_id(ingest)
    # the confidence and the time are not part of the identity: replay cannot change them anyway
    assert c.event_id(ingest) == _candidate(observed_at=5.0).event_id(ingest)


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("verbosity", True),
        ("a/b", True),
        ("/verbosity", False),
        ("two words", False),
        ("", False),
        ("x" * 200, True),
        ("x" * 201, False),
    ],
)
def test_is_valid_key_matches_the_facet_key_rule(key: str, ok: bool) -> None:
    assert is_valid_key(key) is ok


@pytest.mark.parametrize(
    ("text", "limit", "slug"),
    [
        ("I realized I prefer terse answers", 40, "i-realized-i-prefer-terse-answers"),
        (
            "Going forward I want concise replies only",
            40,
            "going-forward-i-want-concise-replies-onl",
        ),
        ("Ends right at a dash boundary", 9, "ends-righ"),
        ("ab cd", 3, "ab"),
        ("Naïve café", 40, "naive-cafe"),
        ("  --hello__world--  ", 40, "hello-world"),
        ("日本語", 40, ""),
    ],
)
def test_slugify(text: str, limit: int, slug: str) -> None:
    assert slugify(text, limit) == slug


def test_squash_spaces() -> None:
    assert squash_spaces("  Alice \t Johnson\n") == "Alice Johnson"
