"""Standing declarations: what the user said for good is set, not learned.

"From now on answer in German", "remember that I work on the billing team": a statement framed as
standing (see `statements`) is the user setting a value, exactly as they would with
`learning.update_facet`: the facet is set and pinned at once, so one clear declaration is
enough, and PROFILE.md shows it as the user's own setting. Its sentence is also Explicit
evidence, so the facet points back to the turn. Undo goes through `unpin_facet` or
`forget_facet`; a later contrary declaration replaces it.

A declared sentence often carries a reflection cue too ("remember that I ..."); the reflection
producer would file the same sentence as a goal. Once a sentence is understood as a statement,
that goal is dropped: "remember that I work on the billing team" is identity, not a goal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from services.producers.candidates import Candidate
from services.producers.statements import Statement

_NOT_WORD = re.compile(r"[^\w]+")


def declared(statements: Iterable[Statement]) -> list[Statement]:
    """The standing statements, one per (class, key): within a message the last one wins."""
    last: dict[tuple[str, str], Statement] = {}
    for statement in statements:
        if statement.standing:
            last.pop((statement.facet_class, statement.key), None)
            last[(statement.facet_class, statement.key)] = statement
    return list(last.values())


def _words(text: str) -> str:
    return _NOT_WORD.sub(" ", text.replace("\u2019", "'").lower()).strip()


def without_restated(reflections: Sequence[Candidate], statements: Sequence[Statement]
                     ) -> list[Candidate]:
    """The reflection goals whose sentence is not already a statement."""
    if not statements:
        return list(reflections)
    stated = [_words(s.sentence) for s in statements]
    return [c for c in reflections
            if not any(s and (s in _words(c.value) or _words(c.value) in s) for s in stated)]
