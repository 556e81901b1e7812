"""Staleness, eligibility and strong contradictions (services/habits/scoring.py)."""

from __future__ import annotations

import datetime
import math

import pytest

from services.habits.conflict import Wording
from services.habits.scoring import (
    MAX_STALENESS,
    Signal,
    contradicted,
    eligible,
    fresh_enough,
    staleness,
    staleness_from,
    utc_day,
)

COND, DO = "When I ask for a status report", "Keep it to three bullet points"


def test_staleness_formula() -> None:
    assert staleness(0, 0) == 0.0
    assert staleness(1, 0) == pytest.approx(0.05)
    assert staleness(10, 1) == pytest.approx(1 - 0.95**10 / 2)
    assert staleness(0, 3) == pytest.approx(0.75)
    assert staleness(-5, 0) == 0.0
    assert 0.0 <= staleness(10_000, 100) <= 1.0


def test_stale_habits_are_excluded() -> None:
    assert not fresh_enough(0.95)
    assert fresh_enough(MAX_STALENESS)
    assert not fresh_enough(math.nextafter(MAX_STALENESS, 1.0))
    # 0.95 ** 59 < 0.05: two months without an affirmation is past 0.95
    assert staleness(59, 0) > 0.95
    assert not fresh_enough(staleness(59, 0))


def test_staleness_from_last_confident_affirmation() -> None:
    signals = [
        Signal("2024-05-01", 1, 9000),
        Signal("2024-05-10", 1, 7499),  # too weak to count as an affirmation
        Signal("2024-05-05", 1, 7500),
    ]
    assert staleness_from(signals, "2024-05-15", "2024-04-01") == pytest.approx(
        staleness(10, 0)
    )


def test_contradictions_after_the_affirmation_count_once_a_day() -> None:
    signals = [
        Signal("2024-05-01", -1, 9000),  # before the affirmation
        Signal("2024-05-02", 1, 8000),
        Signal("2024-05-02", -1, 9000),  # same day: cannot be placed after it
        Signal("2024-05-03", -1, 9000),
        Signal("2024-05-03", -1, 6000),
        Signal("2024-05-04", -1, 9000),
        Signal("2024-06-01", -1, 9000),  # after today
    ]
    assert staleness_from(signals, "2024-05-05", "2024-04-01") == pytest.approx(
        staleness(3, 2)
    )


def test_no_affirmation_counts_from_creation() -> None:
    signals = [Signal("2024-05-03", -1, 9000)]
    assert staleness_from(signals, "2024-05-05", "2024-05-01") == pytest.approx(
        staleness(4, 1)
    )
    assert staleness_from([], "2024-05-01", "2024-05-01") == 0.0


def test_eligible_boundary() -> None:
    assert eligible([("e1", "2024-05-01"), ("e2", "2024-05-01"), ("e3", "2024-05-02")])
    assert not eligible([("e1", "2024-05-01"), ("e2", "2024-05-02")])


def test_same_day_refs_are_not_eligible() -> None:
    assert not eligible([(f"e{i}", "2024-05-01") for i in range(10)])


def test_duplicate_refs_count_once() -> None:
    refs = [("e1", "2024-05-01"), ("e1", "2024-05-02"), ("e2", "2024-05-01"), ("e2", "x")]
    assert not eligible(refs)
    assert not eligible([("e1", "2024-05-01"), ("e2", "2024-05-02"), ("e2", "2024-05-03")])


def old(habit_id: str, polarity: int = 1, behavior: str = DO) -> Wording:
    return Wording(habit_id, COND, behavior, polarity)


NEW = Wording("proposal", "  when i ask for a STATUS report", "keep it to three bullet points", -1)


def test_contradiction_with_exactly_one_match() -> None:
    assert contradicted(NEW, 8500, True, [old("h1"), old("h2", -1), old("h3", 1, "Be brief")]) \
        == "h1"


def test_contradiction_with_no_match() -> None:
    assert contradicted(NEW, 9000, True, []) is None
    assert contradicted(NEW, 9000, True, [old("h1", -1)]) is None


def test_contradiction_with_two_matches_is_left_to_review() -> None:
    assert contradicted(NEW, 9000, True, [old("h1"), old("h2")]) is None


def test_contradiction_needs_confidence_and_the_flag() -> None:
    assert contradicted(NEW, 8499, True, [old("h1")]) is None
    assert contradicted(NEW, 8500, True, [old("h1")]) == "h1"
    assert contradicted(NEW, 10_000, False, [old("h1")]) is None


def test_a_wording_tuple_is_accepted() -> None:
    wording = (NEW.condition, NEW.behavior, NEW.polarity)
    assert contradicted(wording, 8500, True, [old("h1")]) == "h1"
    assert contradicted((COND, DO, 0), 9000, True, [old("h1")]) is None


def test_the_same_habit_listed_twice_is_one_match() -> None:
    assert contradicted(NEW, 9000, True, [old("h1"), old("h1")]) == "h1"


def test_utc_day() -> None:
    assert utc_day(0) == "1970-01-01"
    moment = datetime.datetime(2024, 5, 1, 23, 59, 59, tzinfo=datetime.UTC).timestamp()
    assert utc_day(moment) == "2024-05-01"
    assert utc_day(moment + 1) == "2024-05-02"
