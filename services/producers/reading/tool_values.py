"""Which key a named tool fills, and when a named tool is not the speaker's value for it.

The reader finds tools by the catalogue's names; what a sentence says of each decides whether it
becomes a statement: the key it fills (a tool of several categories takes the one the sentence
names or a tool beside it has), a tool named only as what some thing is written in ("the deploy
is a bash script"), and a tool said as a side one beside the main one of the same key ("I mostly
write SQL and a bit of R": a key holds one value, and the side one, said last, would replace the
main one in the learning cache).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from habitus.vocabulary import tools


def key_of(tool: str, sentence_tools: set[str], sentence: str = "") -> str | None:
    """The category a tool fills: the one the sentence names ("bun as my package manager"),
    or another of its categories that a tool named beside it has ("scratch pnpm, we moved to
    bun": bun as the package manager), or its usual one."""
    options = tools.categories(tool)
    if not options:
        return None
    low = sentence.lower()
    for category in options:
        if category.replace("_", " ") in low:
            return category
    for other in sentence_tools - {tool}:
        for category in options:
            if category in tools.categories(other):
                return category
    return options[0]


#: a tool named as what a thing is written in ("the deploy is a bash script"): said of the
#: thing, not of the speaker, it is no tool they use
ARTEFACT_AFTER_RE = re.compile(r"^\s+(?:scripts?|quer(?:y|ies)|files?|snippets?|one-liners?|"
                               r"commands?|notebooks?|jobs?|functions?)\b", re.IGNORECASE)
#: a tool being learned, not used ("I'm currently learning Rust", "picking up Go"): a goal
#: of the speaker's, not their tooling
LEARNING_BEFORE_RE = re.compile(
    r"\b(?:learning|learn|studying|study|picking\s+up|pick\s+up|getting\s+into|"
    r"lerne|apprends|apprendre|aprendo|aprender|estudiando)\s+(?:a\s+bit\s+of\s+|\S+\s+)?$",
    re.IGNORECASE)
#: a tool said as a side one: "a bit of R", "some Go", "occasionally Rust", "ein bisschen Go"
_MINOR_RE = re.compile(r"\b(?:a\s+(?:bit|little)\s+(?:of\s+)?|some|occasionally|sometimes|"
                       r"rarely|now\s+and\s+then|ein\s+bisschen|etwas|manchmal|"
                       r"un\s+peu\s+(?:de|d')|parfois|un\s+poco\s+de|a\s+veces)\s*$",
                       re.IGNORECASE)


def side_tool(tool: str, category: str, sentence: str, message_tools: Iterable[str]) -> bool:
    """Whether the sentence names `tool` as a side one ("a bit of R") beside another tool of
    the same key named without such words ("I mostly write SQL and a bit of R")."""
    mentions = [(start, name) for start, _, _, name in tools.mentions(sentence)]
    side = {name for start, name in mentions
            if _MINOR_RE.search(sentence[max(0, start - 24):start]) is not None}
    if tool not in side:
        return False
    named = set(message_tools)
    return any(name != tool and name not in side and key_of(name, named, sentence) == category
               for _, name in mentions)
