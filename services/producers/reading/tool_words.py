"""When a word the vocabulary knows as a tool is the tool: "Go", "Rust", "Express" and "Cursor"
are everyday words too, and a name after a title is a person's.

The slot finder (services.producers.reading.slots) asks these about each tool it finds: an
everyday word counts only after a word that uses a tool ("use Rust", "write Go"), before one
that says what it is for or whose it is ("redis for caching", "Go is our main language"), or
as an item of a list of tools the sentence began ("I use Neovim and Rust", which the clause
splitter cuts at its "and").
"""

from __future__ import annotations

import re

from habitus.vocabulary import tools
from services.producers.reading.gates import TOOL_BAN_RE

_I = re.IGNORECASE

#: a word that uses a tool, right before it ("use", "written in", "deploy on", "avec")
_CONTEXT_RE = re.compile(
    r"\b(?:use|uses|using|used|with|code\s+in|written\s+in|write\s+in|switch(?:ed)?\s+to|"
    r"moved\s+to|prefer|write|code|deploy|run|runs|stack|nutzen|nutze|benutzen|mit|utilise|"
    r"(?:'re|are|'m|am|run|runs|built|build|deploy)\s+on|"
    r"utilisons|avec|usamos|uso|"
    r"con|suggest|recommend|language|langage|lenguaje|sprache)\s+(?:\w+\s+)?$", _I)


#: a title right before a name: a person, whatever tool shares the name ("Mr Jenkins")
TITLE_BEFORE_RE = re.compile(r"\b(?:mr|mrs|ms|mx|dr|prof|herr|frau|mme|sr|sra)\.?\s+$", _I)
#: what follows a tool's name said of something else ("the vim extension", "jest is outdated")
NOT_THE_TOOL_RE = re.compile(
    r"^[\s-]*(?:extension|plugin|mode|keybindings?|bindings|emulation|stuff\s+is\s+(?:outdated|"
    r"old|obsolete|gone)|(?:is|are)\s+(?:outdated|obsolete|deprecated|gone|dead))\b", _I)

#: what a tool is for, or whose it is, right after it ("redis for caching", "Go is our ...")
_FOR_AFTER_RE = re.compile(r"\s+(?:for|für|pour|para)\s", _I)
_OURS_AFTER_RE = re.compile(r"\s+(?:is|are|ist|est|es)\s+(?:our|my|unsere?|mein\w*|notre|mon|ma|"
                            r"nuestr[oa]|mi)\b", _I)


def in_tool_context(clause: str, start: int) -> bool:
    """An everyday word ("go", "rust", "express") is a tool only after a tool-ish verb."""
    before = clause[max(0, start - 40):start]
    if start == 0 and _FOR_AFTER_RE.match(clause, len(clause.split(maxsplit=1)[0])):
        return True  # "redis for caching"
    if start == 0 and _OURS_AFTER_RE.match(clause, len(clause.split(maxsplit=1)[0])):
        return True  # "Go is our main language"
    return _CONTEXT_RE.search(before) is not None or TOOL_BAN_RE.search(before) is not None


#: what joins the items of a list: "Neovim and Rust", "Postgres, Go"
_LISTED_RE = re.compile(r"(?:,|&|\b(?:and|und|et|y)\b)\s*$", _I)


def listed_after_a_tool(clause: str, sentence: str) -> bool:
    """Whether the clause goes on a list of tools the sentence began before it: "I use Neovim
    and Rust" is split at "and", and "Rust" alone at the start of a clause would be a word."""
    at = sentence.find(clause.strip(" \x00"))
    joined = _LISTED_RE.search(sentence, 0, at) if at > 0 else None
    if joined is None:
        return False
    head = sentence[:joined.start()].rstrip()
    return any(end == len(head) for _, end, _, _ in tools.mentions(head))
