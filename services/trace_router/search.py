"""`traces.search` without a plaintext index: the words, the query syntax, the match and rank.

A trace's query and result are sealed with their user's key (habitus.crypto.columns), so
Postgres can no longer read them, and a tsvector of them would be the plaintext again on disk.
What the store keeps instead is `traces.search_terms`: each distinct word of a trace, sealed for
its user. Sealing is deterministic, so a query word sealed for a user equals that user's term
for it; once the user's key is destroyed the terms mean nothing, and erasure deletes them.

The store finds candidates by their terms; the final say is here, over the opened text:

- words: a word is a run of letters and digits (the underscore, as every other character,
  separates), lowercased: what `words` gives. Words longer than `MAX_WORD` characters are not
  indexed, so they cannot be searched for.
- the query, web-search syntax (the subset `websearch_to_tsquery` gave that the docs promise):
  words (all of them), "a phrase" (its words next to each other, in order), -word and
  -"a phrase" (not), `or` between two parts (either). A word written with punctuation inside
  ("rate-limit") is a phrase of its words, as Postgres took it. An exclusion only narrows: a
  query (or an `or` part) made of exclusions alone finds nothing.
- the text matched is the query and the result as one, as the tsvector was: a phrase may run
  from the end of the query into the result.
- rank: for every word the matching parts ask for, log(1 + how often the trace holds it),
  summed: more of the words, and more often, ranks higher (0 never: a match holds a word).

Pure: no I/O, no keys.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: the longest word indexed (its sealed form must fit a B-tree entry with room to spare)
MAX_WORD: Final = 100

_WORD = re.compile(r"[^\W_]+")
#: a query's tokens: an optionally negated quoted phrase (the closing quote optional), or a run
#: of anything else but blanks and quotes
_TOKEN = re.compile(r'(?P<neg>-?)"(?P<phrase>[^"]*)"?|(?P<bare>[^\s"]+)')


def words(text: str) -> list[str]:
    """The words of `text`, in order, as the index keeps them."""
    return _WORD.findall(text.lower())


def indexed(text: str) -> set[str]:
    """The distinct words of `text` that get a term."""
    return {w for w in words(text) if len(w) <= MAX_WORD}


@dataclass(frozen=True, slots=True)
class Clause:
    """One word, or a phrase (several, adjacent and in order); `negated`: must not occur."""

    words: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    """Parts joined by `or`, each a conjunction of clauses with at least one not negated."""

    parts: tuple[tuple[Clause, ...], ...]

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """Every word the query names, once, in order of appearance (what the store looks
        up: the positive words to find candidates, the negated ones to drop some early)."""
        return tuple(dict.fromkeys(w for part in self.parts for c in part for w in c.words))

    def needs(self) -> list[tuple[list[int], list[int]]]:
        """Per part, the indexes (in `vocabulary`) of the words a trace must hold, and of the
        single words it must not: a first cut the terms can make before the text is opened
        (a negated phrase is left to `matches`)."""
        at = {w: i for i, w in enumerate(self.vocabulary)}
        out = []
        for part in self.parts:
            required = sorted({at[w] for c in part if not c.negated for w in c.words})
            excluded = sorted({at[c.words[0]] for c in part
                               if c.negated and len(c.words) == 1})
            out.append((required, excluded))
        return out


def parse(text: str) -> Query:
    """`text` in web-search syntax as a `Query` (parts with no word to find are dropped)."""
    parts: list[tuple[Clause, ...]] = []
    current: list[Clause] = []
    for m in _TOKEN.finditer(text):
        bare = m.group("bare")
        if bare is not None and bare.lower() == "or":
            parts.append(tuple(current))
            current = []
            continue
        if bare is not None:
            negated = bare.startswith("-")
            found = tuple(words(bare.lstrip("-")))
        else:
            negated = bool(m.group("neg"))
            found = tuple(words(m.group("phrase")))
        if found:
            current.append(Clause(found, negated))
    parts.append(tuple(current))
    return Query(tuple(p for p in parts if any(not c.negated for c in p)))


def _occurs(clause: Clause, text: Sequence[str], counts: Counter[str]) -> bool:
    if len(clause.words) == 1:
        return counts[clause.words[0]] > 0
    n = len(clause.words)
    first = clause.words[0]
    return any(text[i:i + n] == list(clause.words)
               for i in range(len(text) - n + 1) if text[i] == first)


def rank(query: Query, query_text: str, result_text: str) -> float | None:
    """How well the trace whose query and result these are matches (None: it does not)."""
    text = words(f"{query_text} {result_text}")
    counts = Counter(text)
    asked: set[str] = set()
    for part in query.parts:
        if all(_occurs(c, text, counts) != c.negated for c in part):
            asked.update(w for c in part if not c.negated for w in c.words)
    if not asked:
        return None
    return math.fsum(math.log1p(counts[w]) for w in sorted(asked))
