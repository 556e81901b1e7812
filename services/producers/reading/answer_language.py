"""Whether a language a clause names is the one the user asks answers in: "in German", "auf
Deutsch", "English please", "Speak German with me"; not what the user is, speaks or learns
("I'm Dutch", "I speak German", "still learning German", "Languages: English (native),
Spanish (fluent)"), nor the language some other texts are kept in ("We prefer German for
customer docs")."""

from __future__ import annotations

import re

from services.producers.reading.slots import Slot

_LANGUAGE_FRAME_RE = re.compile(
    # "I speak German" is what the user can do, "speak German with me" what they ask for
    r"(?:(?<!\bi\s)(?<!\bwe\s)\b(?:in|auf|en|to|speak|talk|write|answer|reply|respond|"
    r"sprich\w*|antwort\w*|"
    r"schreib\w*|parle\w*|réponds|répondez|écris|habla\w*|respond\w*|contést\w*|escrib\w*)"
    r"\s+(?:(?:only|just|nur|seulement|solo|back|zurück|plain|simple|easy|basic|einfachem|"
    r"einfaches|sencillo|facile)\s+)?|\bprefer(?:s|red)?\s+|\bi\s+said\s+|^)$",
    re.IGNORECASE)
_LANGUAGE_AFTER_RE = re.compile(r"^\s*(?:please|pls|bitte|por\s+favor|s'il|only|nur|por\s+fa)",
                                re.IGNORECASE)


#: a language kept for some texts, not for the answers: "German for customer docs", "Spanish
#: für die Protokolle"; what may follow "for" and still mean the answers ("for now", "for me")
_KEPT_FOR_RE = re.compile(
    r"^\s+(?:for|für|pour|para)\s+(?!(?:now|me|us|you|this|the\s+rest|rest|answers?|replies|"
    r"responses?|everything|all|good|today|the\s+future|future|jetzt|mich|uns|dich|alles|"
    r"immer|heute|diesmal|dieses\s+mal|moi|nous|toi|tout|maintenant|aujourd'hui|celle-ci|"
    r"celui-ci|ça|cette\s+fois|mí|nosotros|ti|todo|ahora|hoy|esta\s+vez|once)(?![\w-]))"
    r"(?:the\s+|our\s+|my\s+|all\s+|die\s+|unsere?\w*\s+|meine?\w*\s+|les\s+|nos\s+|mes\s+|"
    r"los\s+|las\s+|nuestr\w+\s+|mis\s+)?[\w-]", re.IGNORECASE)


#: a sentence about the languages the user speaks: "I speak English, French and a bit of
#: Italian", "Languages: English (native), Spanish (fluent)"
_SPOKEN_RE = re.compile(
    r"\b(?:i|we)\s+(?:also\s+|can\s+|only\s+)?speak\b|\bich\s+spreche\b|\bje\s+parle\b|"
    r"\bhablo\b|\b(?:fluent|bilingual)\s+in\b|\bnative\s+\w+\s+speaker\b|\bnatively\b|"
    r"\bfluently\b|"
    # a level in brackets after each language: "English (native), Spanish (B2)"
    r"\(\s*(?:native|fluent|conversational|intermediate|beginner|basic|[abc][12]|"
    r"muttersprach\w*|fließend|grundkenntnisse|courant|langue\s+maternelle|nativo|nativa|"
    r"fluido|fluida|lengua\s+materna|bilingual)\b|"
    r"^(?:languages|sprachen|langues|idiomas|lenguas)\s*:", re.IGNORECASE)


#: what may follow a language that is an item of a list: its level in brackets, nothing else
_LISTED_RE = re.compile(r"^\W*(?:\([^)]*\)\W*)?$")


def asked_for(clause: str, slot: Slot, sentence: str = "") -> bool:
    """A language named as the one to answer in ("in German", "auf Deutsch", "English
    please"), not as something the user is or learns ("I'm Dutch", "still learning German"),
    nor as the one some other texts are kept in ("We prefer German for customer docs"). A
    language alone in a list of those the user speaks ("I speak English, French and a bit of
    Italian") asks for none: only a frame of its own does ("..., but answer in English")."""
    if _KEPT_FOR_RE.match(clause[slot.end:]) is not None:
        return False
    before = clause[max(0, slot.start - 30):slot.start]
    if _SPOKEN_RE.search(sentence) and not before.strip() and _LISTED_RE.match(
            clause[slot.end:]):
        return False  # an item of the list; "... but English is fine" says more
    return (_LANGUAGE_FRAME_RE.search(before) is not None
            or _LANGUAGE_AFTER_RE.match(clause[slot.end:]) is not None)
