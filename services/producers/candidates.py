"""The candidate value every producer returns, and the small text helpers they share.

A `Candidate` is a plain frozen value, not a pydantic model: the producers are pure functions
called once per ingest event, and the service wiring turns each candidate into a
`CandidateEmitted` payload (`as_payload`) with an id derived from the ingest event
(`event_id`), so replaying the same event can never publish a second candidate.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from habitus.ids import derived_event_id
from habitus.vocabulary import canonical_city, canonical_timezone, check, find_city
from habitus.vocabulary.roles import canonical_role

PROVIDER_PROFILE = "provider_profile"
EMAIL_SIGNATURE = "email_signature"
LENGTH_RATIO = "length_ratio"
EDIT_WINDOW = "edit_window"
CORRECTION_REPEAT = "correction_repeat"
REFLECTION = "reflection"
EXPLICIT_STATEMENT = "explicit_statement"

#: limits of `CandidateEmitted` (habitus.events.domain): a candidate outside them would be
#: rejected at publish time, so producers must never build one
MAX_KEY_CHARS = 200
MAX_VALUE_CHARS = 2000
_KEY_RE = re.compile(r"^[^\s/][^\s]*$")
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One observation a producer makes: "this user seems to have <class>/<key>=<value>"."""

    facet_class: str
    key: str
    value: str
    cue_family: str
    confidence: float
    evidence: tuple[dict[str, Any], ...]
    observed_at: float
    producer: str
    #: how a statement was meant (`habitus.events.domain.Stance` values); None for other cues
    stance: str | None = None
    #: the statement's sentence, for provenance
    sentence: str | None = None

    def as_payload(self) -> dict[str, Any]:
        """The `CandidateEmitted` payload as a dict (by alias: the class travels as `class`)."""
        return {
            "class": self.facet_class,
            "key": self.key,
            "value": self.value,
            "cue_family": self.cue_family,
            "evidence": [dict(ref) for ref in self.evidence],
            "initial_confidence": self.confidence,
            "observed_at": self.observed_at,
            "producer": self.producer,
            **({"stance": self.stance} if self.stance is not None else {}),
            **({"sentence": self.sentence[:500]} if self.sentence else {}),
        }

    def event_id(self, ingest_event_id: str) -> str:
        """A deterministic event id from the ingest event, the producer and the facet value.

        Redelivery or replay of the same ingest event yields the same id, so the stream's
        duplicate window and every projection keep exactly one copy.
        """
        return derived_event_id(
            ingest_event_id, self.producer, self.facet_class, self.key, self.value
        )


def is_valid_key(key: str) -> bool:
    """Whether `key` would pass the `CandidateEmitted` key constraint."""
    return 0 < len(key) <= MAX_KEY_CHARS and _KEY_RE.fullmatch(key) is not None


def squash_spaces(text: str) -> str:
    """Collapse runs of whitespace and strip, so the same value typed twice compares equal."""
    return _SPACE_RE.sub(" ", text).strip()


def slugify(text: str, max_chars: int) -> str:
    """Lowercase ASCII slug ([a-z0-9-]), at most `max_chars`, never ending in "-".

    Accents are folded first ("naïve" -> "naive") so a slug does not depend on how the user's
    keyboard composes characters.
    """
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", folded.lower()).strip("-")
    return slug[:max_chars].rstrip("-")


def canonical_identity(facts: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """Identity facts in the vocabulary's canonical form, the rest dropped: a role in lower
    case, "Berlin, Germany" as the city `Berlin`, "PST" as `America/Los_Angeles` (an
    ambiguous zone resolved by the city named beside it). A fact the vocabulary cannot hold is
    not emitted rather than emitted garbled."""
    near = None
    for key, value, _ in facts:
        if key == "location":
            city = find_city(value.split(",")[0].strip())
            near = city.timezone if city else None
    out = []
    for key, value, confidence in facts:
        canonical: str | None = squash_spaces(value)
        if key == "role":
            canonical = canonical_role(value)
        elif key == "location":
            canonical = canonical_city(value.split(",")[0].strip())
        elif key == "timezone":
            canonical = canonical_timezone(value, near=near)
        if canonical and check("identity", key, canonical) is None:
            out.append((key, canonical, confidence))
    return out
