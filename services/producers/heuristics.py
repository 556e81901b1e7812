"""Producer 3: style and veto candidates from how a session's turns unfold.

Three detectors share one per-session state, which the service keeps in Postgres so a restart
or a second replica sees exactly what the first one saw:

- LengthRatio: the user's messages shrinking against the assistant's replies means the replies
  are longer than the user wants (or, when they stay long, that the balance is right).
- EditWindow: a user who answers within seconds asking for "shorter" or "no bullets" is
  correcting the reply they just read.
- CorrectionRepeat: the same correction three times in a session is no longer a one-off; it
  becomes a veto on what keeps provoking it.

Everything here is a pure function of (state, turn). Time is the turn's event time, never the
wall clock, so replaying a session gives the same candidates as living through it did (the
a wall-clock cooldown would let a replay emit everything at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from habitus.events.domain import CueFamily, FacetClass
from habitus.events.ingest import TurnRecorded
from services.producers.candidates import (
    CORRECTION_REPEAT,
    EDIT_WINDOW,
    LENGTH_RATIO,
    Candidate,
)

MAX_TURNS = 100

# LengthRatio
RATIO_WINDOW = 15
COMPRESSED_RECENT_BELOW = 0.3
COMPRESSED_EARLIER_ABOVE = 0.5
COMPRESSED_CONFIDENCE = 0.65

# EditWindow
EDIT_WINDOW_SECONDS = 30.0
EDIT_COOLDOWN_SECONDS = 300.0
EDIT_CONFIDENCE = 0.70
#: a correction typed within seconds of a reply is short; a longer message is a new request
#: that merely contains a word like "shorter" ("return the shorter of the two strings")
MAX_CORRECTION_CHARS = 280

# CorrectionRepeat
REPEATS_FOR_VETO = 3

#: a request in front of one of these words is negated ("don't make it shorter", "no more
#: detail needed", "why not bullets?") and corrects nothing
_NEGATED_RE = re.compile(
    r"(?:\b(?:don't|dont|do\s+not|doesn't|does\s+not|needn't|never|no\s+need\s+to|no)\s+"
    r"(?:[\w']+\s+){0,2}|\bwhy\s+)$"
)

# (pattern, facet key, facet value): every pattern is word-bounded and runs on lowercased text
# with whitespace squashed and apostrophes folded to "'".
_CORRECTIONS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), key, value)
    for pattern, key, value in (
        # shorter: "shorter", "make it shorter", "shorten it", "too long", "too verbose",
        # "be brief", "more concise", "keep it short", "tl;dr", "less text", a bare "less"
        (r"\bshort(?:er|en)\b", "verbosity", "terse"),
        (r"\btoo\s+(?:long|verbose|wordy|lengthy|much\s+(?:text|detail|info\w*))\b",
         "verbosity", "terse"),
        (r"\b(?:be\s+)?(?:brief|briefer|concise|more\s+concise|succinct)\b", "verbosity", "terse"),
        (r"\bkeep\s+it\s+(?:short|brief|tight)\b", "verbosity", "terse"),
        (r"\btl;?dr\b", "verbosity", "terse"),
        (
            r"\bless\s+(?:text|words|wordy|verbose|verbosity|detail|details|fluff|filler|"
            r"explanation|explanations|prose|rambling|chatty|talking)\b",
            "verbosity",
            "terse",
        ),
        (
            r"^(?:much\s+|a\s+lot\s+|way\s+)?less(?:\s+(?:please|pls|plz))?[.!]*$",
            "verbosity",
            "terse",
        ),
        (r"\b(?:write|say)\s+less\b", "verbosity", "terse"),
        # more detail: "more detail(s)", "more verbose", "in more depth", "elaborate",
        # "too short", "expand on", "go deeper", "make it longer"
        (
            r"\bmore\s+(?:detail|details|detailed|verbose|depth|in-depth|thorough|context|"
            r"explanation|elaboration)\b",
            "verbosity",
            "detailed",
        ),
        (r"\belaborate\b", "verbosity", "detailed"),
        (r"\btoo\s+(?:short|brief|terse)\b", "verbosity", "detailed"),
        (r"\bexpand\s+on\b", "verbosity", "detailed"),
        (r"\bgo\s+deeper\b", "verbosity", "detailed"),
        (r"\bmake\s+it\s+longer\b", "verbosity", "detailed"),
        # just code: "just code", "just the code", "just give me the code", "code only",
        # "only the code"
        (r"\bjust\s+(?:give\s+me\s+|show\s+me\s+)?(?:the\s+)?code\b", "code", "code-first"),
        (r"\bcode\s+only\b", "code", "code-first"),
        (r"\bonly\s+(?:the\s+)?code\b", "code", "code-first"),
        # not bullets: "not bullets", "no bullets", "no bullet points", "without bullets",
        # "stop using bullets", "fewer bullets", "in prose", "as a paragraph"
        (
            r"\b(?:no(?:\s+more)?|not|without|fewer|stop(?:\s+using)?|drop\s+the|lose\s+the|"
            r"(?:don't|dont|do\s+not)\s+use)\s+(?:in\s+|with\s+)?(?:the\s+|any\s+|so\s+many\s+)?"
            r"bullet(?:s|ed|\s+points?|\s+lists?)?\b",
            "format",
            "prose",
        ),
        (r"\b(?:in|as)\s+prose\b", "format", "prose"),
        (r"\bas\s+(?:a\s+)?paragraphs?\b", "format", "prose"),
    )
)
#: one alternation of every pattern: a message none of them can match is dismissed in one scan
_ANY_CORRECTION = re.compile("|".join(f"(?:{pattern.pattern})" for pattern, _, _ in _CORRECTIONS))
#: a word one of which every pattern above needs (a test holds each pattern to one): most chat
#: has none of them and is dismissed by substring checks, in a twentieth of the alternation's time
CORRECTION_WORDS = ("short", "too", "brief", "concise", "succinct", "keep", "tl", "less", "more",
                    "elaborate", "expand", "deeper", "longer", "code", "bullet", "prose",
                    "paragraph")

#: what three of the same correction veto, and how confident the veto is
#: (a veto key is `<kind>=<thing>` with the value `banned`, the shape every producer of vetoes
#: uses, so the explicit "no nested bullets" and three corrections reinforce one facet)
_VETOES: dict[tuple[str, str], tuple[str, str, float]] = {
    ("format", "prose"): ("format=nested-bullets", "banned", 0.75),
    ("verbosity", "terse"): ("style=long-replies", "banned", 0.70),
}


@dataclass
class SessionState:
    """What the detectors remember about one (tenant, user, session)."""

    #: (turn_id, user_len, assistant_len), oldest first, at most MAX_TURNS
    turns: list[tuple[str, int, int]] = field(default_factory=list)
    #: once-per-session emissions already made ("length_ratio:verbosity=terse", ...)
    fired: set[str] = field(default_factory=set)
    #: "key=value" -> event time (user_at) of the last EditWindow emission of that value
    cooldowns: dict[str, float] = field(default_factory=dict)
    #: "key=value" -> corrections matched in the session's edit windows
    corrections: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON document with a stable shape (sorted sets) so equal states store equal."""
        return {
            "turns": [[turn_id, u, a] for turn_id, u, a in self.turns],
            "fired": sorted(self.fired),
            "cooldowns": dict(sorted(self.cooldowns.items())),
            "corrections": dict(sorted(self.corrections.items())),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> SessionState:
        """Read a stored document; None (a new session) or malformed parts give empty parts,
        because a corrupt state must cost at most some candidates, never the consumer."""
        if not isinstance(doc, dict):
            return cls()
        turns: list[tuple[str, int, int]] = []
        raw_turns = doc.get("turns")
        for item in raw_turns if isinstance(raw_turns, list) else []:
            if (
                isinstance(item, list | tuple)
                and len(item) == 3
                and isinstance(item[0], str)
                and all(isinstance(n, int) and not isinstance(n, bool) for n in item[1:])
            ):
                turns.append((item[0], int(item[1]), int(item[2])))
        raw_fired = doc.get("fired")
        fired = (
            {f for f in raw_fired if isinstance(f, str)} if isinstance(raw_fired, list) else set()
        )
        raw_cool = doc.get("cooldowns")
        cooldowns = (
            {
                k: float(v)
                for k, v in raw_cool.items()
                if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            }
            if isinstance(raw_cool, dict)
            else {}
        )
        raw_corr = doc.get("corrections")
        corrections = (
            {
                k: v
                for k, v in raw_corr.items()
                if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            }
            if isinstance(raw_corr, dict)
            else {}
        )
        return cls(
            turns=turns[-MAX_TURNS:], fired=fired, cooldowns=cooldowns, corrections=corrections
        )

    def copy(self) -> SessionState:
        """An independent copy: the containers are new, their immutable items shared."""
        return SessionState(
            turns=list(self.turns),
            fired=set(self.fired),
            cooldowns=dict(self.cooldowns),
            corrections=dict(self.corrections),
        )


# --------------------------------------------------------------------------- detectors


def _mean_ratio(turns: list[tuple[str, int, int]]) -> float:
    """Mean of user_len / assistant_len; a turn without an assistant reply counts 0."""
    return sum(u / a if a > 0 else 0.0 for _, u, a in turns) / len(turns)


def _length_ratio(state: SessionState, p: TurnRecorded) -> list[Candidate]:
    if len(state.turns) < 2 * RATIO_WINDOW:
        return []
    window = state.turns[-2 * RATIO_WINDOW :]
    earlier = _mean_ratio(window[:RATIO_WINDOW])
    recent = _mean_ratio(window[RATIO_WINDOW:])
    # The vocabulary's verbosity is terse or detailed: messages that shrank against the
    # replies lean terse; messages as long as the replies say nothing about answer length
    # (they used to be emitted as `balanced`, a value no prompt could act on).
    if recent < COMPRESSED_RECENT_BELOW and earlier > COMPRESSED_EARLIER_ABOVE:
        value, confidence = "terse", COMPRESSED_CONFIDENCE
    else:
        return []
    token = f"{LENGTH_RATIO}:verbosity={value}"
    if token in state.fired:
        return []
    state.fired.add(token)
    evidence = {
        "type": "turn_window",
        "session_id": p.session_id,
        "from_turn_id": window[0][0],
        "to_turn_id": window[-1][0],
    }
    return [
        Candidate(
            facet_class=FacetClass.STYLE.value,
            key="verbosity",
            value=value,
            cue_family=CueFamily.BEHAVIORAL.value,
            confidence=confidence,
            evidence=(evidence,),
            observed_at=p.user_at,
            producer=LENGTH_RATIO,
        )
    ]


def corrections_in(message: str) -> list[tuple[str, str]]:
    """The (key, value) corrections `message` asks for, in pattern order.

    A negated request ("don't make it shorter") is no correction, and a message asking for two
    values of one key ("less fluff but more detail on X") is ambiguous, so that key is dropped.
    """
    if len(message) > MAX_CORRECTION_CHARS:
        return []
    low = message.replace("\u2019", "'").lower()
    if not any(word in low for word in CORRECTION_WORDS):
        return []
    text = re.sub(r"\s+", " ", low).strip()
    if _ANY_CORRECTION.search(text) is None:  # most messages: one scan instead of one per pattern
        return []
    return _corrections_of(text)


def _corrections_of(text: str) -> list[tuple[str, str]]:
    """Every pattern over normalised `text` (what `corrections_in` does past its prefilter)."""
    found: dict[str, set[str]] = {}
    order: list[tuple[str, str]] = []
    for pattern, key, value in _CORRECTIONS:
        for match in pattern.finditer(text):
            if _NEGATED_RE.search(text[: match.start()]):
                continue
            if (key, value) not in order:
                order.append((key, value))
            found.setdefault(key, set()).add(value)
            break
    return [(key, value) for key, value in order if len(found[key]) == 1]


def _in_edit_window(p: TurnRecorded) -> bool:
    if p.previous_assistant_at is None:
        return False
    return 0 <= p.user_at - p.previous_assistant_at < EDIT_WINDOW_SECONDS


def _edit_window(state: SessionState, p: TurnRecorded) -> list[Candidate]:
    if not _in_edit_window(p):
        return []
    out: list[Candidate] = []
    turn_ref = {"type": "turn", "session_id": p.session_id, "turn_id": p.turn_id}
    for key, value in corrections_in(p.user_message):
        kv = f"{key}={value}"
        count = state.corrections.get(kv, 0) + 1
        state.corrections[kv] = count

        last = state.cooldowns.get(kv)
        # abs(): an older turn delivered late is as close to the last emission as a newer one
        if last is None or abs(p.user_at - last) >= EDIT_COOLDOWN_SECONDS:
            state.cooldowns[kv] = p.user_at if last is None else max(last, p.user_at)
            out.append(
                Candidate(
                    facet_class=FacetClass.STYLE.value,
                    key=key,
                    value=value,
                    cue_family=CueFamily.BEHAVIORAL.value,
                    confidence=EDIT_CONFIDENCE,
                    evidence=(dict(turn_ref),),
                    observed_at=p.user_at,
                    producer=EDIT_WINDOW,
                )
            )

        if count >= REPEATS_FOR_VETO and (key, value) in _VETOES:
            # only corrections whose opposite the vocabulary can name become a veto
            veto_key, veto_value, confidence = _VETOES[(key, value)]
            token = f"veto:{veto_key}={veto_value}"
            if token not in state.fired:
                state.fired.add(token)
                out.append(
                    Candidate(
                        facet_class=FacetClass.VETO.value,
                        key=veto_key,
                        value=veto_value,
                        cue_family=CueFamily.BEHAVIORAL.value,
                        confidence=confidence,
                        evidence=(dict(turn_ref),),
                        observed_at=p.user_at,
                        producer=CORRECTION_REPEAT,
                    )
                )
    return out


def observe_turn(state: SessionState, p: TurnRecorded) -> tuple[SessionState, list[Candidate]]:
    """Fold one turn into a copy of `state`; return the new state and the candidates it yields.

    A turn already in the state (a redelivery) changes nothing and yields nothing, so counts
    and ratios never see a turn twice. The service must therefore commit the new state only
    after the candidates are published: a redelivery before that commit recomputes the same
    candidates (with the same derived event ids), one after it is a no-op.
    """
    new = state.copy()
    if any(turn_id == p.turn_id for turn_id, _, _ in new.turns):
        return new, []
    new.turns.append((p.turn_id, len(p.user_message), len(p.assistant_message)))
    del new.turns[:-MAX_TURNS]
    candidates = _edit_window(new, p) + _length_ratio(new, p)
    return new, candidates
