"""What a router may know about a query before answering it: the routing context and its class.

The context is cheap on purpose: `router.select_model` builds one on every request, so every
pattern is compiled at import, the detectors are single regex scans, and language detection looks
at the first `_LANGUAGE_SCAN_CHARS` characters only.

The code, math and reasoning patterns are the seed's router patterns. One set of patterns serves
both the heuristic's rules and the query class every learning policy keys its statistics on: the
reference classifies traces with narrower patterns than it routes with, so a query it routes as
code ("x = a -> b") is learned about as "short"; here a query is the same kind of query for both.

`query_class` checks, in order: code, math, shorter than `SHORT_CHARS` ("short"), longer than
`LONG_CHARS` or reasoning words ("long"), else "general". Reasoning puts a query in "long" because
the heuristic sends both to its largest model: a class groups the queries the heuristic treats
alike, so a learned class that is still below its sample threshold falls back to one heuristic
rule, not to several. A short reasoning question ("why?") stays "short", as the heuristic's
short rule comes first too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from habitus.contract.configuration import QUERY_CLASSES, QueryClass

__all__ = ["DEFAULT_LANGUAGE", "DEFAULT_URGENCY", "LONG_CHARS", "QUERY_CLASSES", "SHORT_CHARS",
           "QueryClass", "RoutingContext", "build_context", "classify", "detect_language",
           "query_class", "routing_signals"]


#: below this many characters a query is "short" (the heuristic's smallest-model rule)
SHORT_CHARS: Final = 50
#: above this many characters a query is "long" (the heuristic's largest-model rule)
LONG_CHARS: Final = 500
DEFAULT_URGENCY: Final = 0.5
DEFAULT_LANGUAGE: Final = "en"

# The keywords share one `\b(?:...)\s` branch: the same matches as one branch each, in half
# the time (every recorded trace's query is searched).
_CODE = re.compile(
    r"```|`[^`]+`|\b(?:def|class|import|function|const|var|let)\s"
    r"|\bif\s*\(|->|=>|\{\s*\}|\bfor\s+\w+\s+in\s|#include|System\.out",
    re.IGNORECASE,
)
_MATH = re.compile(
    r"\b(?:solve|integral|equation|proof|derivative|matrix|theorem|calculate|compute|sigma"
    r"|sum|limit|probability)\b",
    re.IGNORECASE,
)
_REASONING = re.compile(
    r"\b(?:explain|analyze|compare|why|step[- ]by[- ]step|reason|think)\b", re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class RoutingContext:
    """One query as the policies see it; `urgency` is 0 (can wait) to 1 (real time)."""

    query: str
    query_length: int
    has_code: bool
    has_math: bool
    has_reasoning: bool
    urgency: float = DEFAULT_URGENCY
    language: str = DEFAULT_LANGUAGE


def build_context(query: str, urgency: float | None = None) -> RoutingContext:
    """The routing context of `query`; an absent or non-finite urgency is the neutral 0.5.

    Urgency is clamped to [0, 1], so a client sending 2 means "as urgent as it gets", not an
    error.
    """
    return RoutingContext(
        query=query,
        query_length=len(query),
        has_code=_CODE.search(query) is not None,
        has_math=_MATH.search(query) is not None,
        has_reasoning=_REASONING.search(query) is not None,
        urgency=_urgency(urgency),
        language=detect_language(query),
    )


def _urgency(value: float | None) -> float:
    if value is None or isinstance(value, bool):
        return DEFAULT_URGENCY
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DEFAULT_URGENCY
    if not math.isfinite(number):
        return DEFAULT_URGENCY
    return min(max(number, 0.0), 1.0)


def query_class(ctx: RoutingContext) -> QueryClass:
    """The class a learning policy keys its statistics on (see the module docstring)."""
    if ctx.has_code:
        return "code"
    if ctx.has_math:
        return "math"
    if ctx.query_length < SHORT_CHARS:
        return "short"
    if ctx.query_length > LONG_CHARS or ctx.has_reasoning:
        return "long"
    return "general"


def classify(query: str) -> QueryClass:
    """The class of a raw query, as a trace's query is classified when it is recorded (the
    same rules as `query_class`, without the language, which no class depends on: this runs
    on every recorded trace)."""
    if _CODE.search(query) is not None:
        return "code"
    if _MATH.search(query) is not None:
        return "math"
    if len(query) < SHORT_CHARS:
        return "short"
    if len(query) > LONG_CHARS or _REASONING.search(query) is not None:
        return "long"
    return "general"


def routing_signals(query: str, urgency: float | None = None) -> RoutingContext:
    """The context a policy would read for `query`, without the language (no policy reads
    it): what the optimizer records of each trace, to replay the policies over it."""
    return RoutingContext(
        query="", query_length=len(query), has_code=_CODE.search(query) is not None,
        has_math=_MATH.search(query) is not None,
        has_reasoning=_REASONING.search(query) is not None, urgency=_urgency(urgency))


# --------------------------------------------------------------------------- language

_LANGUAGE_SCAN_CHARS: Final = 1000

#: (first code point, last code point, language) of scripts that name their language well
#: enough for routing; Cyrillic is reported as "ru" and Arabic script as "ar"
_SCRIPTS: Final[tuple[tuple[int, int, str], ...]] = (
    (0x0370, 0x03FF, "el"),
    (0x0400, 0x04FF, "ru"),
    (0x0590, 0x05FF, "he"),
    (0x0600, 0x06FF, "ar"),
    (0x0900, 0x097F, "hi"),
    (0x0E00, 0x0E7F, "th"),
    (0x3040, 0x30FF, "ja"),  # hiragana and katakana
    (0x4E00, 0x9FFF, "zh"),  # CJK unified ideographs
    (0xAC00, 0xD7AF, "ko"),
)

#: frequent function words that are rare in the other listed languages; a word in two sets
#: counts for both, and English wins ties
_STOP_WORDS: Final[dict[str, frozenset[str]]] = {
    "en": frozenset("the and is of to what how you for with are this that it my can".split()),
    "fr": frozenset("le les des est une pour qui dans pas vous je avec sur du au ce".split()),
    "de": frozenset("der die das und ist nicht ich ein eine zu mit sie wie was auf den".split()),
    "es": frozenset("el los las y por para con una como qué cómo está es muy del".split()),
    "it": frozenset("il di che è per non sono della gli una come questo ho".split()),
    "pt": frozenset("os não um uma com você do da em são isso para como".split()),
    "nl": frozenset("het een en niet van ik dat je met voor op zijn wat hoe".split()),
}
_WORD = re.compile(r"[^\W\d_]+")


def detect_language(text: str) -> str:
    """A cheap guess at the query's language: its dominant script, else its function words.

    Good enough to prefer a multilingual model, never a classifier: text with no signal (code,
    "Hi", numbers) is English, the default the policies assume.
    """
    sample = text[:_LANGUAGE_SCAN_CHARS]
    counts: dict[str, int] = {}
    latin = 0
    for char in sample:
        if not char.isalpha():
            continue
        point = ord(char)
        if point < 0x0250:
            latin += 1
            continue
        for first, last, language in _SCRIPTS:
            if first <= point <= last:
                counts[language] = counts.get(language, 0) + 1
                break
    if counts:
        # any kana makes CJK text Japanese: Japanese mixes kanji with kana, Chinese has none
        if counts.get("ja"):
            counts["ja"] += counts.pop("zh", 0)
        script, hits = max(counts.items(), key=lambda item: item[1])
        if hits >= latin:
            return script
    words = _WORD.findall(sample.lower())
    if not words:
        return DEFAULT_LANGUAGE
    best, best_hits = DEFAULT_LANGUAGE, 0
    for language, stop_words in _STOP_WORDS.items():
        hits = sum(1 for word in words if word in stop_words)
        if hits > best_hits:
            best, best_hits = language, hits
    return best
