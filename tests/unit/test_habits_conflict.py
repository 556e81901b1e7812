"""Conflicts under one condition (services/habits/conflict.py)."""

from __future__ import annotations

import pytest

from services.habits.conflict import Conflict, Wording, check_conflict, opposed

COND = "When I ask for a status report"


def w(habit_id: str, behavior: str, polarity: int = 1, condition: str = COND) -> Wording:
    return Wording(habit_id, condition, behavior, polarity)


def test_same_behavior_opposite_polarity() -> None:
    target = w("new", "Use bullet points", 1)
    assert check_conflict(target, [w("h1", "  use BULLET points ", -1)]) == Conflict(
        "h1", "opposite_polarity"
    )


def test_same_behavior_same_polarity_is_the_same_habit_not_a_conflict() -> None:
    target = w("new", "Use bullet points")
    assert check_conflict(target, [w("h1", "use bullet points")]) is None


def test_other_conditions_and_own_id_are_ignored() -> None:
    target = w("h1", "Always use tables")
    others = [
        w("h1", "Never use tables"),
        w("h2", "Never use tables", condition="When I ask for a summary"),
    ]
    assert check_conflict(target, others) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Always include a summary", "Never include a summary"),
        ("Use tables", "Do not use tables"),
        ("Use tables.", "Don't use tables"),
        ("Include the test output", "Do not include the test output"),
        ("Ask before sending", "Do not ask before sending"),
        ("Prefer short sentences", "Avoid short sentences"),
        ("Be verbose", "Be concise"),
        ("Write long answers", "Write short answers"),
        ("Do run the tests first", "Do not run the tests first"),
    ],
)
def test_opposed_pairs(a: str, b: str) -> None:
    assert opposed(a, b) and opposed(b, a)
    assert check_conflict(w("new", a), [w("h1", b)]) == Conflict("h1", "opposed_behavior")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Keep it to three bullets", "Use a table"),
        ("Always include a summary", "Never include a chart"),
        ("Be concise and always verbose", "Be concise and never concise"),
    ],
)
def test_not_opposed(a: str, b: str) -> None:
    assert not opposed(a, b)


def test_divergent_behavior() -> None:
    target = w("new", "Keep it to three bullets")
    assert check_conflict(target, [w("h1", "Lead with the risks")]) == Conflict(
        "h1", "same_condition_divergent_behavior"
    )


def test_first_hit_in_order() -> None:
    target = w("new", "Always use tables")
    others = [
        w("h0", "always use tables"),
        w("h1", "Put the numbers first"),
        w("h2", "Never use tables"),
    ]
    assert check_conflict(target, others) == Conflict("h1", "same_condition_divergent_behavior")
    assert check_conflict(target, iter(others[::-1])) == Conflict("h2", "opposed_behavior")
