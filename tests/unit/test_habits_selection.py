"""The pure steps of `habits.select` (services/habits/selection.py): which habits may guide at
all, which are nearest the request, and how the chosen ones are rendered."""

from __future__ import annotations

import dataclasses
import datetime
import math

import numpy as np
import pytest

from habitus.events.domain import HabitStatus, ReviewStatus
from services.habits.identity import identity, sha256
from services.habits.ledger import Habit, Support
from services.habits.selection import (
    HEADER,
    HEADING,
    MAX_ELIGIBLE,
    MAX_SECTION_CHARS,
    RETRIEVAL_FLOOR_BP,
    RETRIEVE_TOP,
    eligible,
    nearest,
    render,
)

S, R = HabitStatus, ReviewStatus
COND, DO = "When I ask for a status report", "Keep it to three bullet points"
NOW = datetime.datetime(2024, 5, 10, 12, tzinfo=datetime.UTC).timestamp()
DAY = 86_400.0
LAW = sha256("")
NEW_LAW = sha256("deny: tables")


def habit(habit_id: str = "h1", when: str = COND, do: str = DO, *, polarity: int = 1,
          confidence_bp: int = 8000, status: HabitStatus = S.ACTIVE, law_hash: str = LAW,
          created_at: float = NOW, support: tuple[Support, ...] = ()) -> Habit:
    return Habit(habit_id=habit_id, condition=when, behavior=do, polarity=polarity,
                 status=status, review_status=R.ACCEPTED_ACTIVE, confidence_bp=confidence_bp,
                 origin="analyze", created_at=created_at, updated_at=created_at,
                 support=support, approved_identity=identity(when, do, polarity),
                 law_hash=law_hash).sealed()


# -- eligible -------------------------------------------------------------------------------

def test_eligible_keeps_only_active_approved_current_confident_fresh_habits() -> None:
    ok = habit("ok")
    at_the_floor = habit("floor", confidence_bp=7500)
    # 60 days without an affirmation: 1 - 0.95^60 > 0.8
    stale = habit("stale", created_at=NOW - 60 * DAY)
    # the same age, but affirmed confidently yesterday: fresh again
    affirmed = habit("affirmed", created_at=NOW - 60 * DAY,
                     support=(Support("ev-1", "2024-05-09", 1, 9000),))
    rejected = [
        dataclasses.replace(ok, habit_id=f"status-{s.value}", status=s).sealed()
        for s in HabitStatus if s is not S.ACTIVE
    ] + [
        habit("unsure", confidence_bp=7499),
        habit("old-law", law_hash=NEW_LAW),
        dataclasses.replace(habit("no-hash"), law_hash=None).sealed(),
        dataclasses.replace(habit("unapproved"), approved_identity=None).sealed(),
        # approved under another wording: the approval no longer holds
        dataclasses.replace(habit("reworded"), behavior="Write a full paragraph").sealed(),
        stale,
    ]
    kept = eligible([*rejected, ok, at_the_floor, affirmed], LAW, NOW)
    assert [h.habit_id for h in kept] == ["affirmed", "ok", "floor"]
    # under the new law none of them is checked yet
    assert eligible([ok, at_the_floor], NEW_LAW, NOW) == []


def test_eligible_staleness_boundary() -> None:
    # 0.95^d <= 0.2 first at d = 32: 31 days is fresh enough, 32 is not
    assert 1 - 0.95**31 <= 0.8 < 1 - 0.95**32
    assert [h.habit_id for h in eligible([habit("a", created_at=NOW - 31 * DAY)], LAW, NOW)
            ] == ["a"]
    assert eligible([habit("b", created_at=NOW - 32 * DAY)], LAW, NOW) == []


def test_eligible_sorts_by_confidence_then_id_and_keeps_the_top_100() -> None:
    habits = [habit(f"h{i:03d}", f"When I ask for report {i}", DO,
                    confidence_bp=7500 + (i * 37) % 2500) for i in range(150)]
    kept = eligible(habits, LAW, NOW)
    assert len(kept) == MAX_ELIGIBLE == 100
    expected = sorted(habits, key=lambda h: (-h.confidence_bp, h.habit_id))[:100]
    assert kept == expected
    keys = [(-h.confidence_bp, h.habit_id) for h in kept]
    assert keys == sorted(keys)
    # the ones left out are no more confident than the last one kept
    assert all(h.confidence_bp <= kept[-1].confidence_bp for h in habits if h not in kept)
    # equal confidence: by id
    ties = [habit(i, confidence_bp=9000) for i in ("h-b", "h-c", "h-a")]
    assert [h.habit_id for h in eligible(ties, LAW, NOW)] == ["h-a", "h-b", "h-c"]


# -- nearest --------------------------------------------------------------------------------

def unit(cos: float) -> np.ndarray:
    """A unit vector whose dot product with [1, 0] is `cos`."""
    return np.array([cos, math.sqrt(1 - cos * cos)])


REQUEST = np.array([1.0, 0.0])


def test_nearest_floor_is_1500_bp_inclusive() -> None:
    assert RETRIEVAL_FLOOR_BP == 1500
    hs = [habit("at"), habit("below"), habit("above"), habit("opposite")]
    got = nearest(REQUEST, hs, [np.array([0.15, 0.0]), np.array([0.1499, 0.0]), unit(0.9),
                                unit(-0.9)])
    assert [h.habit_id for h in got] == ["above", "at"]


def test_nearest_keeps_the_top_12_best_first_ties_by_id() -> None:
    assert RETRIEVE_TOP == 12
    hs = [habit(f"h{i:02d}") for i in range(20)]
    # h00..h09 at 0.5, h10..h19 at 0.8 (the dot is floored to basis points first)
    vectors = [unit(0.5) if i < 10 else unit(0.8) for i in range(20)]
    got = nearest(REQUEST, list(reversed(hs)), list(reversed(vectors)))
    assert [h.habit_id for h in got] == [f"h{i}" for i in range(10, 20)] + ["h00", "h01"]
    # a difference below one basis point is a tie
    close = nearest(REQUEST, [habit("b"), habit("a")],
                    [np.array([0.80004, 0.0]), np.array([0.80001, 0.0])])
    assert [h.habit_id for h in close] == ["a", "b"]


def test_nearest_of_nothing_and_of_mismatched_inputs() -> None:
    assert nearest(REQUEST, [], []) == []
    with pytest.raises(ValueError):
        nearest(REQUEST, [habit("a"), habit("b")], [unit(0.9)])


# -- render ---------------------------------------------------------------------------------

def test_render_nothing_is_empty() -> None:
    assert render([]) == ""
    assert render(()) == ""


def pairs_in(text: str) -> list[tuple[str, str]]:
    """The (When:, Do:) line pairs of a rendered section, in order."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.lstrip("- ").startswith("When:"):
            assert lines[i + 1].strip().startswith("Do:"), text
            out.append((line, lines[i + 1]))
    return out


def test_render_when_and_do_pairs_under_the_header() -> None:
    text = render([habit("h1"), habit("h2", "When I write an email", "Use exclamation marks",
                                      polarity=-1)])
    assert text.startswith(HEADING) and HEADER in text
    (when1, do1), (when2, do2) = pairs_in(text)
    assert "I ask for a status report" in when1 and do1.strip() == f"Do: {DO}"
    # polarity -1 is something to avoid, said so on the Do line
    assert "I write an email" in when2
    assert "avoid" in do2.lower() and do2.endswith("Use exclamation marks")
    assert "avoid" not in do1.lower()
    assert len(text) <= MAX_SECTION_CHARS


def test_render_stays_within_2000_characters_and_never_cuts_a_pair() -> None:
    hs = [habit(f"h{i}", f"When I ask for report {i} " + "x" * 300, "Keep it short " + "y" * 200)
          for i in range(10)]
    text = render(hs)
    assert len(text) <= MAX_SECTION_CHARS
    pairs = pairs_in(text)
    assert 1 <= len(pairs) < 10 and text.count("Do:") == len(pairs)
    # the pairs kept are the first ones, in order, each whole
    for (when, do), h in zip(pairs, hs, strict=False):
        assert when.endswith(h.condition[len("When "):]) and do.endswith(h.behavior)


def test_render_is_never_over_2000_characters_at_the_boundary() -> None:
    """Single pairs of every size around the limit, the trailing newline included."""
    for size in range(1600, 2001):
        text = render([habit("h1", "When " + "c" * (size - 5), DO)])
        assert len(text) <= MAX_SECTION_CHARS, size
        assert text == "" or len(pairs_in(text)) == 1


def test_render_with_no_pair_that_fits_is_empty() -> None:
    assert render([habit("h1", "c" * 1990, DO)]) == ""
