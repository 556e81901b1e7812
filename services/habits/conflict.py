"""Whether a habit conflicts with another under the same condition.

Two habits for the same situation that say different things cannot both guide an answer, so
activation waits for a person to choose. The kinds tell the reviewer how they differ:

- `opposite_polarity`: the same behavior, one to do and one to avoid;
- `opposed_behavior`: wordings that say the opposite, found by swapping one opposed pair
  ("always" / "never", "use" / "do not use", ...) turning one behavior into the other;
- `same_condition_divergent_behavior`: anything else different under the same condition,
  which may be compatible, but a person should say so.

The same behavior with the same polarity is the same habit, which duplicate handling deals
with, not a conflict. Only the normalised condition is compared: a paraphrased condition is
for the semantic duplicate check to find.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from services.habits.identity import normalise

ConflictKind = Literal["opposite_polarity", "opposed_behavior", "same_condition_divergent_behavior"]

#: one side of each pair becomes the other; negations are spelled out (see `_tokens`)
OPPOSED_PAIRS: tuple[tuple[str, str], ...] = (
    ("do", "do not"),
    ("use", "do not use"),
    ("include", "do not include"),
    ("ask", "do not ask"),
    ("always", "never"),
    ("prefer", "avoid"),
    ("verbose", "concise"),
    ("long", "short"),
)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_CONTRACTIONS = {"don't": ("do", "not"), "dont": ("do", "not"), "don\u2019t": ("do", "not")}


@dataclass(frozen=True)
class Wording:
    habit_id: str
    condition: str
    behavior: str
    polarity: int


@dataclass(frozen=True)
class Conflict:
    habit_id: str
    kind: ConflictKind


def _tokens(text: str) -> tuple[str, ...]:
    """Words of a normalised behavior, punctuation dropped and "don't" spelled "do not", so
    "Don't use tables." and "use tables" are one swap apart."""
    out: list[str] = []
    for word in _WORD.findall(normalise(text).replace("\u2019", "'")):
        out.extend(_CONTRACTIONS.get(word, (word,)))
    return tuple(out)


def _swaps(tokens: tuple[str, ...], old: tuple[str, ...], new: tuple[str, ...]) -> Iterable[
    tuple[str, ...]
]:
    size = len(old)
    for i in range(len(tokens) - size + 1):
        if tokens[i:i + size] == old:
            yield tokens[:i] + new + tokens[i + size:]


def opposed(a: str, b: str) -> bool:
    """Whether one swap of an opposed pair turns behavior `a` into behavior `b`."""
    ta, tb = _tokens(a), _tokens(b)
    for left, right in OPPOSED_PAIRS:
        one, other = tuple(left.split()), tuple(right.split())
        for old, new in ((one, other), (other, one)):
            if any(swapped == tb for swapped in _swaps(ta, old, new)):
                return True
    return False


def check_conflict(target: Wording, others: Iterable[Wording]) -> Conflict | None:
    """The first of `others` (in the order given) that conflicts with `target`, or None."""
    condition = normalise(target.condition)
    behavior = normalise(target.behavior)
    for other in others:
        if other.habit_id == target.habit_id or normalise(other.condition) != condition:
            continue
        if normalise(other.behavior) == behavior:
            if other.polarity != target.polarity:
                return Conflict(other.habit_id, "opposite_polarity")
            continue
        if opposed(target.behavior, other.behavior):
            return Conflict(other.habit_id, "opposed_behavior")
        return Conflict(other.habit_id, "same_condition_divergent_behavior")
    return None
