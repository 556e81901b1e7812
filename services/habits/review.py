"""Review as pure functions: whether an approval activates now or waits, and for what; what a
person sees in the numbered review list.

The order of the checks is the order of what a person can do about them: the law first (only
a law change helps), then a conflicting habit, then a possible duplicate (a person resolves
it), then the evidence (Analyze brings more). A direct declaration skips only the evidence.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from habitus.events.domain import HabitStatus, ReviewStatus
from services.habits.conflict import Wording, check_conflict
from services.habits.law import Law, violations
from services.habits.ledger import Habit
from services.habits.scoring import Signal, eligible, staleness_from, utc_day
from services.habits.wording import do_line, when_line

#: statuses a duplicate or a conflict is looked for among
COMPARED = (HabitStatus.ACTIVE, HabitStatus.DISABLED)
#: the approval outcomes that wait: a later check may activate them
WAITING = (ReviewStatus.APPROVED_PENDING_ELIGIBILITY, ReviewStatus.APPROVED_PENDING_CONFLICT,
           ReviewStatus.APPROVED_PENDING_LAW, ReviewStatus.DUPLICATE_RESOLUTION)
#: review-list grouping by shared words (display only; duplicates come from the encoder)
SIMILAR_JACCARD = 0.72


def wording(h: Habit) -> Wording:
    return Wording(h.habit_id, h.condition, h.behavior, h.polarity)


def gate(habit: Habit, *, law: Law, comparators: Iterable[Habit],
         duplicate_ids: Sequence[str]) -> tuple[ReviewStatus, tuple[str, ...]]:
    """What an approval of `habit` leads to now, and what holds it back."""
    denied = violations(law, habit.condition, habit.behavior)
    if denied:
        return ReviewStatus.APPROVED_PENDING_LAW, tuple(denied)
    others = [wording(o) for o in comparators
              if o.habit_id != habit.habit_id and o.status in COMPARED]
    conflict = check_conflict(wording(habit), others)
    if conflict is not None:
        return ReviewStatus.APPROVED_PENDING_CONFLICT, (conflict.habit_id,)
    if duplicate_ids:
        return ReviewStatus.DUPLICATE_RESOLUTION, tuple(duplicate_ids)
    if habit.origin != "declared" and not eligible(habit.refs):
        return ReviewStatus.APPROVED_PENDING_ELIGIBILITY, ()
    return ReviewStatus.ACCEPTED_ACTIVE, ()


def reviewable(habit: Habit) -> bool:
    """A candidate a person may approve (a rejected or archived one must be declared anew)."""
    return habit.status is HabitStatus.CANDIDATE


def waiting(habit: Habit) -> bool:
    return (habit.status is HabitStatus.CANDIDATE and habit.approved
            and habit.review_status in WAITING)


def staleness(habit: Habit, now: float | None = None) -> float:
    signals = [Signal(s.day, s.polarity, s.confidence_bp) for s in habit.support]
    return staleness_from(signals, utc_day(time.time() if now is None else now),
                          created_day=utc_day(habit.created_at))


def as_result(habit: Habit, now: float | None = None) -> dict[str, Any]:
    # as eligibility counts them: a ref cited twice counts once, on its first day
    first_day: dict[str, str] = {}
    for ref, day in habit.refs:
        first_day.setdefault(ref, day)
    return {
        "habit_id": habit.habit_id, "when": habit.condition, "do": habit.behavior,
        "polarity": habit.polarity, "status": habit.status.value,
        "review_status": habit.review_status.value, "approved": habit.approved,
        "confidence_bp": habit.confidence_bp, "staleness": round(staleness(habit, now), 4),
        "support": len(first_day), "days": len(set(first_day.values())),
        "origin": habit.origin, "blocked_by": list(habit.blocked_by),
        "related_id": habit.related_id, "checksum": habit.checksum,
        "created_at": habit.created_at, "updated_at": habit.updated_at,
    }


def review_text(habit: Habit) -> str:
    return f"{when_line(habit.condition)}\n{do_line(habit.behavior, habit.polarity)}"


_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _words(h: Habit) -> set[str]:
    return {w.casefold() for w in _WORD.findall(f"{h.condition} {h.behavior}")}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def review_items(habits: Sequence[Habit], pending: Mapping[str, Sequence[str]],
                 now: float | None = None) -> list[dict[str, Any]]:
    """The numbered list: candidates and what waits (habits `pending` names: duplicate pairs
    awaiting a decision, each side's partners), oldest first."""
    shown = sorted((h for h in habits
                    if h.status is HabitStatus.CANDIDATE or h.habit_id in pending),
                   key=lambda h: (h.created_at, h.habit_id))
    number = {h.habit_id: i for i, h in enumerate(shown, start=1)}
    words = {h.habit_id: _words(h) for h in shown}
    items = []
    for h in shown:
        similar = [number[o.habit_id] for o in shown if o.habit_id != h.habit_id
                   and jaccard(words[h.habit_id], words[o.habit_id]) >= SIMILAR_JACCARD]
        items.append({"number": number[h.habit_id], "text": review_text(h),
                      "habit": as_result(h, now),
                      "duplicates": sorted(number[o] for o in pending.get(h.habit_id, ())
                                           if o in number),
                      "similar": similar})
    return items
