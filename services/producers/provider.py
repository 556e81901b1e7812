"""Producer 1: identity facts a connected provider reports about its account holder.

Account fields are data the user (or their admin) entered into the provider, so they are the
strongest identity signal Habitus gets without the user saying anything. The name, email and
timezone of the user's own account are authoritative: the learning cache holds them Active at
once, until the user changes them or a newer sync differs (waiting for them to "accumulate"
would leave a connected user's name out of their own profile). Role and employer are often
stale or an admin's guess, so they stay Structural evidence that must agree with other signals.
Only the fields with an identity meaning are read; a toolkit's extra fields are ignored rather
than guessed at.
"""

from __future__ import annotations

from habitus.events.domain import CueFamily, FacetClass
from habitus.events.ingest import ProviderProfileSynced
from services.producers.candidates import (
    MAX_VALUE_CHARS,
    PROVIDER_PROFILE,
    Candidate,
    canonical_identity,
    squash_spaces,
)

CONFIDENCE = 0.95

#: the account fields read, in emission order; each becomes the facet key of the same name
FIELDS: tuple[str, ...] = ("name", "email", "timezone", "role", "employer")
#: the fields the provider is the authority on (the account holder's own data)
AUTHORITATIVE_FIELDS = frozenset({"name", "email", "timezone"})


def _normalise(field: str, raw: str) -> str:
    """Spacing is noise in every field; case is noise only in an email address, and folding it
    keeps two providers reporting "Alice@Acme.com" and "alice@acme.com" on one facet value."""
    value = squash_spaces(raw)
    return value.lower() if field == "email" else value


def provider_candidates(p: ProviderProfileSynced, observed_at: float) -> list[Candidate]:
    """Identity candidates for each non-empty known account field of `p`.

    A value longer than a facet value may be is skipped: no real name or role is that long, and
    a truncated one would be a value the user never had.
    """
    out: list[Candidate] = []
    raw_facts = []
    for field in FIELDS:
        raw = getattr(p.fields, field, None)
        if isinstance(raw, str) and (value := _normalise(field, raw)) and (
                len(value) <= MAX_VALUE_CHARS):
            raw_facts.append((field, value, CONFIDENCE))
    for field, value, _ in canonical_identity(raw_facts):
        out.append(
            Candidate(
                facet_class=FacetClass.IDENTITY.value,
                key=field,
                value=value,
                cue_family=(CueFamily.AUTHORITATIVE if field in AUTHORITATIVE_FIELDS
                            else CueFamily.STRUCTURAL).value,
                confidence=CONFIDENCE,
                evidence=(
                    {
                        "type": "provider",
                        "toolkit": p.toolkit,
                        "connection_id": p.connection_id,
                        "field": field,
                    },
                ),
                observed_at=observed_at,
                producer=PROVIDER_PROFILE,
            )
        )
    return out
