"""Sentences and clauses of a user's message, in the user's own voice.

Quoted text, inline code, code fences and `>` quote lines are masked first: words in quotation
marks are somebody else's (a document, an error, an example), never the user's preference. A
sentence ends at . ! ? … before a space, or at a line break; "e.g.", "Dr." and initials end
none, and "Node.js" or "3.11" stay whole. A clause ends at ; : , a dash or a joining word
("and", "but", "so", "und", "aber", "et", "mais", "y", "pero"), so "no emojis and keep it
short" is two statements. Positions are kept, so a clause can always be mapped back to the
message's own characters.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

#: a sentence longer than this is pasted text (a log, a document), not a plain statement
MAX_SENTENCE_CHARS = 400

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'"})
_MASKS = tuple(
    re.compile(p)
    for p in (
        r"(?:```|~~~)[\s\S]*?(?:```|~~~|\Z)",
        r"`[^`\n]*`",
        r"(?m)^[ \t]*>.*$",
        r'"[^"\n]*"',
        "\u201c[^\u201d\n]*\u201d",
        "\u201e[^\u201c\u201d\n]*[\u201c\u201d]",
        "\u00ab[^\u00bb\n]*\u00bb",
        # a message quoted after a colon, apostrophes and all: "help me answer: 'hey! I'm ...'"
        r":\s*'[^\n]{2,}'",
        # "reply to this for me:" and what follows is someone else's text
        r"(?is)(?<=:)\s*\n\s*\n.*\Z",
        # pasted mail or notes: everything after a separator line or a header is someone's
        r"(?ms)^[ \t]*(?:-{3,}|_{3,}|(?:From|Von|De|Subject|Betreff|Objet|Asunto):[^\n]*)$.*\Z",
        # bounded: a line of unmatched quotes must not cost quadratic time
        r"(?<![\w'])'(?![\s,.;:!?]|s\b|t\b|m\b|d\b|ll\b|re\b|ve\b)[^\n']{1,200}'(?!\w)",
    )
)
_LIST_MARKER_RE = re.compile(r"(?m)^([ \t]*)((?:[-*+\u2022]|\d{1,3}[.)])[ \t]+)")
_BOUNDARY_RE = re.compile(r"[.!?\u2026]+(?=\s|$)|\n")
_ABBR_TAIL_RE = re.compile(r"(?:^|[^\w.])((?:\w\.)*\w+)$")
_ABBREVIATIONS = frozenset(
    "e.g i.e dr mr mrs ms prof vs cf approx st jr sr fig no al a.m p.m u.s mt ft z.b bzw "
    "usw ca sr sra etc".split())
_CLAUSE_RE = re.compile(
    # not the comma of "call me by my first name, Sam": the name is what the clause says
    r"\s*[;:\u2013\u2014]\s*|(?<!\bname)\s*,\s*|\s+-\s+|\s*\(\s*|\s*\)\s*"
    r"|\s+(?:and|but|plus|also|und|aber|also|sondern|et|mais|donc|y|e|pero|así\s+que|"
    r"entonces|then)\s+(?=\S)"
    # "so" joins two clauses, but not as "not so formal", "don't be so casual", "is so slow",
    # nor before the one word it intensifies ("don't answer so formally", "so much detail"),
    # nor before a quantity, whatever follows it ("stop using so many bullet points")
    r"|(?<!\bnot)(?<!\bbe)(?<!\bis)(?<!\bare)(?<!\bam)(?<!\bas)(?<!\bso)\s+so\s+"
    r"(?!(?:much|many|few|little)\b)"
    r"(?!(?:\w+ly|often|long|formal|casual|verbose|wordy)\b[\s.!?,]*$)(?=\S)"
    # a condition or concession is a clause of its own ("..., even if I write in English")
    r"|\s+(?=(?:unless|even\s+if|even\s+when|except\s+when|außer\s+wenn|auch\s+wenn|"
    r"selbst\s+wenn|sauf\s+si|même\s+si|a\s+menos\s+que|aunque|incluso\s+si)\b)"
    # "detailed answers with examples": a second style request, read on its own
    r"|\s+(?=(?:with|mit|avec|con)\s+(?:some\s+|a\s+few\s+|des\s+|vielen\s+)?"
    r"(?:examples?|beispielen?|exemples?|ejemplos?|emojis?|tables?|tabellen)\b)",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Clause:
    """A clause of a sentence: its text and its sentence (both masked, apostrophes folded)."""

    text: str
    sentence: str
    #: the sentence as the user wrote it, unmasked: what provenance shows
    original: str
    #: which sentence of the message it belongs to (clauses of one sentence share gates)
    index: int


def _blank(match: re.Match[str]) -> str:
    return "\x00" * len(match.group())


_TLDR_RE = re.compile(r"\btl;\s?dr\b", re.IGNORECASE)


def normalise(text: str) -> str:
    """Composed characters (NFC: a "ç" is one character, never "c" and a cedilla), typographic
    apostrophes folded to "'" (the readers' word lists use that one), and
    "tl;dr" kept as one word rather than split at its semicolon."""
    return _TLDR_RE.sub("tldr", unicodedata.normalize("NFC", text).translate(_APOSTROPHES))


def mask(text: str) -> str:
    """`text` with list markers blanked and everything not in the user's own voice masked
    (same length, so positions still match the original)."""
    text = _LIST_MARKER_RE.sub(lambda m: m.group(1) + " " * len(m.group(2)), text)
    for pattern in _MASKS:
        text = pattern.sub(_blank, text)
    return text


def _is_abbreviation(text: str, dot: int) -> bool:
    tail = _ABBR_TAIL_RE.search(text, max(0, dot - 24), dot)
    if tail is None:
        return False
    word = tail.group(1)
    return word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper())


def sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence of `text`."""
    start = 0
    for m in _BOUNDARY_RE.finditer(text):
        if m.group() == "." and _is_abbreviation(text, m.start()):
            continue
        if text[start : m.end()].strip():
            yield start, m.end()
        start = m.end()
    if text[start:].strip():
        yield start, len(text)


def clauses_of(sentence: str) -> list[str]:
    """The clauses of one (masked) sentence, stripped, empty ones dropped."""
    parts = _CLAUSE_RE.split(sentence)
    return [p.strip(" .!?\u2026\x00") for p in parts if p and p.strip(" .!?\u2026\x00")]


def split(message: str) -> list[Clause]:
    """Every clause of the user's own sentences in `message`, in order."""
    text = normalise(message)
    masked = mask(text)
    out: list[Clause] = []
    for index, (start, end) in enumerate(sentence_spans(masked)):
        body = " ".join(masked[start:end].split())
        if not body.strip("\x00 ") or len(body) > MAX_SENTENCE_CHARS:
            continue
        original = " ".join(text[start:end].split())
        for clause in clauses_of(body):
            if clause.strip("\x00 "):
                out.append(Clause(clause, body, original, index))
    return out
