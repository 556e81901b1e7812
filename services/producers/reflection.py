"""Producer 4 (fast path): goals the user states about themselves in so many words.

"I realized ...", "from now on ...", "please remember ..." are the user telling the agent what
to keep: Explicit evidence, the strongest cue family, so the rule must only fire on sentences
that really are such statements. Cues are matched as whole words ("reminder that I" is not
"remember that I") and questions are skipped ("Do you remember that I ...?" asks, it does not
state).
"""

from __future__ import annotations

import re

from habitus.events.domain import CueFamily, FacetClass
from services.producers.candidates import (
    MAX_VALUE_CHARS,
    REFLECTION,
    Candidate,
    is_valid_key,
    slugify,
    squash_spaces,
)

CONFIDENCE = 0.85
KEY_CHARS = 40

_CUE_RE = re.compile(
    r"\b(?:"
    r"i(?:'ve|\s+have)?\s+(?:now\s+|just\s+)?reali[sz]ed"
    r"|i(?:'ve|\s+have)?\s+(?:now\s+|just\s+)?learn(?:ed|t)"
    r"|i(?:'ve|\s+have)\s+decided"
    r"|i\s+decided"
    r"|going\s+forward"
    r"|moving\s+forward"
    r"|from\s+now\s+on"
    r"|from\s+here\s+on"
    r"|remember\s+that\s+i"
    r"|please\s+remember"
    r"|(?:i\s+want|i'd\s+like|i\s+would\s+like)\s+you\s+to\s+remember"
    r"|keep\s+in\s+mind\s+that\s+i"
    r"|(?:don't|do\s+not)\s+forget\s+that\s+i"
    r")\b",
    re.IGNORECASE,
)
# The cues run on text whose typographic apostrophes are folded to "'" first.

# A sentence ends at . ! or ? followed by whitespace, or at a line break: "Node.js" and "3.5"
# stay whole.
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def _sentences(text: str) -> list[tuple[str, bool]]:
    """(sentence without its final punctuation, is_question) pairs."""
    out: list[tuple[str, bool]] = []
    for chunk in _SENTENCE_END_RE.split(text):
        chunk = chunk.strip()
        out.append((squash_spaces(chunk.rstrip(".!?")), chunk.endswith("?")))
    return out


def reflection_candidates(
    user_message: str, *, session_id: str, turn_id: str, observed_at: float
) -> list[Candidate]:
    """One Goal candidate per distinct cue sentence of `user_message`.

    The key is a slug of the sentence, so the same statement made in two sessions reinforces
    one facet instead of making two; sentences with the same slug in one message count once.
    """
    normalised = user_message.replace("\u2019", "'")
    seen: set[str] = set()
    out: list[Candidate] = []
    for sentence, is_question in _sentences(normalised):
        if is_question or not sentence or _CUE_RE.search(sentence) is None:
            continue
        key = slugify(sentence, KEY_CHARS)
        if not is_valid_key(key) or key in seen:
            continue
        seen.add(key)
        out.append(
            Candidate(
                facet_class=FacetClass.GOAL.value,
                key=key,
                value=sentence[:MAX_VALUE_CHARS],
                cue_family=CueFamily.EXPLICIT.value,
                confidence=CONFIDENCE,
                evidence=({"type": "turn", "session_id": session_id, "turn_id": turn_id},),
                observed_at=observed_at,
                producer=REFLECTION,
            )
        )
    return out
