"""Labels a clause's own words decide, where the encoder's nearest examples named none (or a
style key the words do not hold): a word limit on answers, a move to a named tool, a tool the
speaker uses, length said away, a style the speaker says they prefer. Each rule is one the
encoder missed on real sentences; the words are what make it sure."""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.producers.reading import gates
from services.producers.reading.intents import NONE
from services.producers.reading.slots import Slot

#: a word limit said of the answers, or asked for ("keep it under 80 words", "bitte ..."),
#: not of some text ("the essay must be under 500 words")
_FOR_ANSWERS_RE = re.compile(r"\b(?:answers?|responses?|replies|keep|antwort\w*|bitte|"
                             r"réponses?|respuestas?|please|por\s+favor|s'il)\b", re.IGNORECASE)

#: style keys whose words alone give the value ("kürzer", "no emojis")
_WORDED_KEYS = {"verbosity": "terse", "emoji": "ok", "preamble": "skip"}


def style(clause: str) -> list[tuple[str, str, str]]:
    """The style statement a clause's words make alone (none when they decide nothing)."""
    keys = [k for k in gates.STYLE_CUES if gates.states_style(k, clause)]
    if keys == ["tone"]:  # "make your answers a bit more casual", read as brevity
        register = gates.register_by_words(clause)
        if register is None:  # "be brutally honest with me", read as a friendly tone
            register = gates.manner_by_words(clause)
        return [("style", "tone", register)] if register else []
    if len(keys) != 1 or keys[0] not in _WORDED_KEYS:
        return []
    key = keys[0]
    value = gates.polarity(key, _WORDED_KEYS[key], clause)
    if key == "verbosity" and value == "terse" and not gates.TERSE_WORDS.search(clause) and (
            not gates.negated_padding(clause)) and not gates.detail_said_away(clause):
        return []  # the words decided nothing: no guess
    if key == "emoji" and value == "ok":
        return []  # only a ban on emoji is this sure
    if key == "preamble" and not gates.SKIP_PREAMBLE_RE.search(clause):
        return []  # "get to the point" skips it; "straight to my nonna" says nothing
    return [("style", key, value)] if value else []


_LAYOUTS = ("tables", "bullets", "prose")
#: a manner asked for as one: "please be gentle", "sei freundlich", "sois direct"
_BE_RE = re.compile(r"^(?:(?:and|et|und|y|e)\s+)?(?:please\s+|pls\s+|bitte\s+)?"
                    r"(?:be|sei|seid|sois|soyez|sé)\b", re.IGNORECASE)
#: a verb that is itself a register ("duz mich", "vouvoie-moi", "tutéame")
#: a verb of answering, whose manner word is the register asked for ("antworte bitte förmlich",
#: "réponds-moi de manière formelle")
_ANSWER_VERB_RE = re.compile(r"\b(?:answer\w*|repl(?:y|ies)|respond|antwort\w*|répond\w*|"
                             r"respond[ae]\w*|contest[ae]\w*)\b", re.IGNORECASE)
#: brevity asked for in so many words: "keep things brief", "keep your answers short"
_KEEP_SHORT_RE = re.compile(
    r"\b(?:keep|make)\s+(?:it|things|them|everything|(?:your\s+|the\s+)?(?:answers?|"
    r"responses?|replies|explanations?))\s+(?:(?:very|really|super|nice\s+and|a\s+bit)\s+)?"
    r"(?:short|brief|concise|succinct|tight)\b", re.IGNORECASE)
#: a system of units named as the one to use (not "I ran five miles"); the value is metric
#: when the words say metric (métrique, metrisch) and imperial otherwise
_UNITS_RE = re.compile(
    r"\b(?:metric|imperial)\s+(?:units?|system|measurements?)\b"
    r"|\b(?:use|in|prefer|want|switch\s+to|stick\s+to|stay\s+with)\s+(?:the\s+)?"
    r"(?:metric|imperial)\b|\bmetrisch\w*\s+(?:einheiten|system)|\bimperial\w*\s+einheiten|"
    r"\bsystème\s+(?:métrique|impérial)|\bunités\s+(?:métriques|impériales)|"
    r"\bsistema\s+(?:métrico|imperial)|\bunidades\s+(?:métricas|imperiales)", re.IGNORECASE)
_METRIC_RE = re.compile(r"m[eé]tri", re.IGNORECASE)
#: a clock format named as the one to use ("24-hour time", "24h format", "am/pm"), not a
#: duration ("in 24 hours", "12 hours ago")
_CLOCK_RE = re.compile(
    r"\b(?:24|12|twenty[- ]four|twelve)[- ]?(?:h|hours?|hr)\s*(?:time|clock|format)\b"
    r"|\b(?:use|in|prefer|want)\s+(?:the\s+)?(?:24|12)\s?h\b|\bam\s*/\s*pm\b"
    r"|\bmilitary\s+time\b|\b(?:24|12)[- ]?stunden[- ]?(?:format|uhr|anzeige)"
    r"|\bformat\s+(?:24|12)\s?h\b|\bformato\s+(?:de\s+)?(?:24|12)\s?(?:h|horas)\b",
    re.IGNORECASE)


#: the speaker saying what they prefer, or asking the answers to change ("be more casual")
_PREFERS_RE = re.compile(
    r"\b(?:i|we)\s+(?:(?:really|much|would|do|generally|usually|just)\s+)?"
    r"(?:prefer|like|love|want)\b|\bi'd\s+(?:rather|like|prefer|love)\b"
    r"|\b(?:ich|wir)\s+(?:bevorzuge|bevorzugen|mag|mögen|hätte\s+gern)\b"
    r"|\b(?:je|nous)\s+(?:préfère|préférons|veux|voudrais)\b|\bj'aime\b"
    r"|\b(?:prefiero|preferimos|quiero)\b|\bme\s+gusta"
    r"|^(?:please\s+)?be\s+(?:a\s+(?:bit|little)\s+|much\s+|way\s+)?(?:more|less)\b",
    re.IGNORECASE)


def setting(clause: str) -> str | None:
    """A units or clock format the clause names as the one to use ("use metric units", "I
    want times in 24-hour format"): its words decide, whatever the encoder read (its bank has
    no examples of either)."""
    units = _UNITS_RE.search(clause)
    if units is not None:
        return "units=metric" if _METRIC_RE.search(units.group()) else "units=imperial"
    clock = _CLOCK_RE.search(clause)
    if clock is not None:
        said = clock.group().lower()
        return "clock=12h" if "12" in said or "twelve" in said or "am" in said else "clock=24h"
    return None


def label(clause: str, found: Sequence[Slot]) -> str:
    """The label a clause's words decide alone when the encoder named none (NONE otherwise):
    a word limit on answers ("under 80 words", which the encoder read differently from "under
    100 words"); a move to a named tool ("I switched from VS Code to Cursor": the tool moved
    to is named, the old one negated); a named tool the speaker says they use or prefer ("I
    prefer yarn for installs", which the encoder read as nothing); length said away ("Bitte
    keine langen Erklärungen"); a style the speaker says they prefer, in the words that decide
    it ("I prefer answers in bullet points", "be more casual with me")."""
    if gates.WORD_LIMIT_RE.search(clause) and _FOR_ANSWERS_RE.search(clause):
        return "verbosity=terse"
    if gates.SWITCHED_RE.search(clause) and gates.first_person(clause) and any(
            s.kind == "tool" for s in found):
        return "tooling"
    if any(s.kind == "tool" and gates.USES_RE.search(clause[:s.start]) for s in found):
        return "tooling"
    if gates.asks_for_less(clause) or _KEEP_SHORT_RE.search(clause):
        return "verbosity=terse"  # "keep things brief please", which the encoder left open
    if _BE_RE.match(clause):  # "please be gentle", "et sois bref", which the encoder left open
        worded = style(clause)
        if len(worded) == 1:
            return f"{worded[0][1]}={worded[0][2]}"
    if gates.REGISTER_VERB_RE.search(clause) or _ANSWER_VERB_RE.search(clause):
        # "bitte duz mich": the verb is the register; "antworte bitte förmlich": the verb's
        # manner is
        register = gates.register_by_words(clause)
        if register is not None:
            return f"tone={register}"
    if _PREFERS_RE.search(clause):
        worded = style(clause)
        if len(worded) == 1:  # "I like short answers", "be more casual with me"
            return f"{worded[0][1]}={worded[0][2]}"
        # a layout named as one ("I prefer answers in bullet points"); two named ("prose over
        # bullet points") are left to the encoder
        named = layout(clause)
        if named is not None:
            return f"format={named}"
    return NONE


def layout(clause: str) -> str | None:
    """The one layout the clause names as a way to answer ("put the answer in a table", "in
    bullet points"); None when it names none, or two ("prose over bullet points": the
    encoder decides)."""
    layouts = [v for v in _LAYOUTS if gates.VALUE_CUES[f"format={v}"].search(clause)]
    return layouts[0] if len(layouts) == 1 else None


def style_or_layout(clause: str) -> list[tuple[str, str, str]]:
    """`style`, or else the table or bullets the words name as the way to answer: for a clause
    the encoder read as another key's statement ("Always put the answer in a table", read as
    skipping the preamble)."""
    # prose by its words alone is too weak a sign ("keep responses under a paragraph" asks for
    # brevity), and a layout said with a no anywhere before it is a ban, for the ban's reading
    return style(clause) or layout_beside(clause)


def layout_beside(clause: str) -> list[tuple[str, str, str]]:
    """A table or bullets the words name beside another key's statement ("short answers in
    bullet points"), unless said away or gone over again."""
    named = layout(clause)
    if named not in ("tables", "bullets") or _SAID_NO_RE.search(clause) or (
            gates.revisits_shown_layout(clause)):
        return []
    turned = gates.polarity("format", named, clause)
    return [("style", "format", turned)] if turned else []


_SAID_NO_RE = re.compile(r"\b(?:never|no|not|don't|dont|do\s+not|without|stop|avoid|nie|nicht|"
                         r"kein\w*|ohne|jamais|pas|sans|nunca|sin)\b", re.IGNORECASE)

