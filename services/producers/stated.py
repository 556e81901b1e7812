"""Producer 5 (fast path): what the user says about themselves, as Explicit evidence.

The reading is `services.producers.reading` (statements by meaning, values from the
vocabulary). This module turns statements into candidates and handles confirmations: when the
agent asks "Should I remember that you prefer short answers?" (the question PROFILE.md's and
the prompt's "not yet sure" facets come with, `habitus.vocabulary.confirmation_question`), the
question is read back into the facet it proposes, kept with the session, and the user's next
message settles it: a plain yes is a confirmation (the user set it), a plain no a denial (the
value is dropped). Anything else leaves the question unanswered and the facet as it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from habitus.events.domain import CueFamily, Stance
from habitus.vocabulary import first_person
from services.producers.candidates import EXPLICIT_STATEMENT, Candidate
from services.producers.reading.reader import Statement

CONFIDENCE = 0.9
Proposal = tuple[str, str, str]

_QUESTION_RE = re.compile(r"\b(?:should|shall)\s+i\s+remember\s+that\s+(you[^?]{3,200})\?",
                          re.IGNORECASE)
_YES_RE = re.compile(
    r"^(?:yes|yeah|yep|yup|sure|correct|right|exactly|absolutely|definitely|please do|do|"
    r"that's right|that is right|ja|genau|richtig|gerne|oui|exactement|volontiers|sí|si|claro|"
    r"correcto|exacto|vale)\b[\s,.!]*(?:please|thanks|thank you|bitte|danke|merci|gracias)?"
    r"[\s.!]*$", re.IGNORECASE)
_NO_RE = re.compile(
    r"^(?:no|nope|nah|not really|don't|do not|wrong|nein|nee|non|pas du tout|para nada)\b"
    r"[\s,.!]*(?:thanks|thank you|danke|merci|gracias)?[\s.!]*$", re.IGNORECASE)


def question_in(assistant_message: str) -> str | None:
    """The sentence to read when the agent asks a confirmation question ("Should I remember
    that you prefer short answers?" is read as "I prefer short answers."), or None."""
    matches = list(_QUESTION_RE.finditer(assistant_message or ""))
    return first_person(matches[-1].group(1)) + "." if matches else None


def proposal_from(statements: Sequence[Statement]) -> Proposal | None:
    """The facet a question proposes: the one statement read from it (else none)."""
    if len(statements) != 1:
        return None
    s = statements[0]
    return (s.facet_class, s.key, s.value)


def answer_to(proposal: Proposal | None, user_message: str) -> Stance | None:
    """CONFIRMED or DENIED when `user_message` answers the pending question; else None."""
    if proposal is None:
        return None
    text = " ".join(user_message.split())
    if _YES_RE.match(text):
        return Stance.CONFIRMED
    if _NO_RE.match(text):
        return Stance.DENIED
    return None


def statement_candidates(statements: Sequence[Statement], *, session_id: str, turn_id: str,
                         observed_at: float) -> list[Candidate]:
    """One Explicit candidate per distinct (class, key, value) of a message's statements: the
    same facet said twice in one message is one observation (the last stance wins)."""
    chosen: dict[tuple[str, str, str], Statement] = {}
    for s in statements:
        chosen.pop((s.facet_class, s.key, s.value), None)
        chosen[(s.facet_class, s.key, s.value)] = s
    return [_candidate(s.facet_class, s.key, s.value, s.stance, s.sentence, session_id,
                       turn_id, observed_at) for s in chosen.values()]


def answer_candidate(proposal: Proposal, stance: Stance, sentence: str, *, session_id: str,
                     turn_id: str, observed_at: float) -> Candidate:
    facet_class, key, value = proposal
    return _candidate(facet_class, key, value, stance, sentence, session_id, turn_id,
                      observed_at)


def _candidate(facet_class: str, key: str, value: str, stance: Stance, sentence: str,
               session_id: str, turn_id: str, observed_at: float) -> Candidate:
    return Candidate(
        facet_class=facet_class, key=key, value=value,
        cue_family=CueFamily.EXPLICIT.value, confidence=CONFIDENCE,
        evidence=({"type": "turn", "session_id": session_id, "turn_id": turn_id},),
        observed_at=observed_at, producer=EXPLICIT_STATEMENT, stance=stance.value,
        sentence=sentence,
    )
