"""The numbers that decide whether a habit may guide, and when it should step aside.

- Staleness grows while nobody affirms a habit (5% a day) and faster with each day the person
  contradicted it since. A habit the person has stopped following should fade on its own
  instead of waiting for someone to archive it. The selector uses habits up to 0.8.
- Eligibility asks for evidence from at least three places over at least two days: a habit
  is a repeated way of working, and one busy afternoon is not a repetition.
- A contradiction makes an active habit dormant only when it is strong, confident, and points
  at exactly one habit; anything less ambiguous-looking is left to review, because putting
  the wrong habit to sleep silently is worse than asking.

Days are UTC calendar days ('YYYY-MM-DD'), so "two distinct days" means the same thing in
every process whatever its time zone.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.habits.conflict import Wording
from services.habits.identity import normalise

AFFIRMATION_MIN_BP = 7500
MAX_STALENESS = 0.8
DAILY_DECAY = 0.05
MIN_SOURCE_REFS = 3
MIN_DISTINCT_DAYS = 2
STRONG_CONTRADICTION_BP = 8500


def utc_day(epoch_seconds: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.UTC).date().isoformat()


def _days_between(earlier: str, later: str) -> int:
    return (datetime.date.fromisoformat(later) - datetime.date.fromisoformat(earlier)).days


def staleness(days_since_affirmation: float, contradiction_days: int) -> float:
    """`1 - (1 - DAILY_DECAY) ** days / (1 + c)`, in [0, 1]; a negative age (a clock ahead of
    ours) counts as fresh rather than as an error."""
    days = max(0.0, float(days_since_affirmation))
    c = max(0, contradiction_days)
    remaining: float = (1.0 - DAILY_DECAY) ** days
    value = 1.0 - remaining / (1 + c)
    return min(1.0, max(0.0, value))


def fresh_enough(value: float) -> bool:
    """Whether a habit this stale may still be selected."""
    return value <= MAX_STALENESS


@dataclass(frozen=True)
class Signal:
    #: the UTC day it was observed, 'YYYY-MM-DD'
    day: str
    #: +1 affirms the habit, -1 contradicts it
    polarity: int
    confidence_bp: int


def staleness_from(signals: Sequence[Signal], today: str, created_day: str) -> float:
    """Staleness on `today`, counted from the last confident affirmation (or, with none, from
    the day the habit was created). A contradiction counts only on a day after that
    affirmation: signals carry days, not times, so a same-day contradiction cannot be placed
    after it. Signals dated after `today` are ignored."""
    seen = [s for s in signals if s.day <= today]
    affirmations = [
        s.day for s in seen if s.polarity > 0 and s.confidence_bp >= AFFIRMATION_MIN_BP
    ]
    since = max(affirmations) if affirmations else created_day
    contradictions = {s.day for s in seen if s.polarity < 0 and s.day > since}
    return staleness(_days_between(since, today), len(contradictions))


def eligible(refs: Iterable[tuple[str, str]]) -> bool:
    """Whether (ref id, UTC day) evidence is enough: MIN_SOURCE_REFS distinct refs over
    MIN_DISTINCT_DAYS distinct days. A ref cited twice counts once, on its first day."""
    days: dict[str, str] = {}
    for ref_id, day in refs:
        days.setdefault(ref_id, day)
    return len(days) >= MIN_SOURCE_REFS and len(set(days.values())) >= MIN_DISTINCT_DAYS


class Worded(Protocol):
    """Anything with a habit's wording: a `Proposal`, a `Wording`."""

    @property
    def condition(self) -> str: ...

    @property
    def behavior(self) -> str: ...

    @property
    def polarity(self) -> int: ...


def contradicted(
    proposal: Worded | tuple[str, str, int],
    confidence_bp: int,
    contradicts: bool,
    active: Sequence[Wording],
) -> str | None:
    """The id of the one active habit a strong contradiction makes dormant, or None.

    The proposal must say it contradicts, at STRONG_CONTRADICTION_BP or more, and exactly one
    active habit must have its normalised condition and behavior with the opposite polarity.
    Two such habits mean the ledger already disagrees with itself: a person decides.
    `proposal` is any object with the wording's attributes, or (condition, behavior, polarity).
    """
    if isinstance(proposal, tuple):
        condition, behavior, polarity = proposal
    else:
        condition, behavior, polarity = proposal.condition, proposal.behavior, proposal.polarity
    if not contradicts or confidence_bp < STRONG_CONTRADICTION_BP or polarity == 0:
        return None
    condition, behavior = normalise(condition), normalise(behavior)
    matches = {
        habit.habit_id
        for habit in active
        if habit.polarity == -polarity
        and normalise(habit.condition) == condition
        and normalise(habit.behavior) == behavior
    }
    return next(iter(matches)) if len(matches) == 1 else None
