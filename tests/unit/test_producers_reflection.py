"""The reflection producer: goals the user states, keyed by their topic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from habitus.vocabulary import check
from services.producers.reflection import (
    CONFIDENCE,
    reflection_candidates,
    topic,
    without_restated,
)

WHERE = {"session_id": "s1", "turn_id": "t1", "observed_at": 1_700_000_000.0}


def goals(message: str) -> list[tuple[str, str]]:
    return [(c.key, c.value) for c in reflection_candidates(message, **WHERE)]


def test_a_decision_is_a_goal_keyed_by_its_topic() -> None:
    [(key, value)] = goals("I've decided to learn Rust this year.")
    assert key == "learn-rust"
    assert value == "I've decided to learn Rust this year"
    [c] = reflection_candidates("I've decided to learn Rust this year.", **WHERE)
    assert (c.facet_class, c.cue_family, c.confidence) == ("goal", "explicit", CONFIDENCE)


def test_two_goals_and_the_same_topic_twice_counts_once() -> None:
    found = goals("I realized I need to ship the billing migration by March. "
                  "My goal is to pass the AWS exam. I decided to learn Rust. "
                  "I have decided to learn Rust, really.")
    assert [k for k, _ in found] == ["ship-billing-migration", "pass-aws-exam", "learn-rust"]


@pytest.mark.parametrize(("message", "key"), [
    ("I'm studying for my AWS Solutions Architect certification, exam is in March.",
     "aws-solutions-architect"),
    ("I am preparing for the Berlin marathon.", "berlin-marathon"),
    ("I'm trying to learn Rust this year.", "learn-rust"),  # the key "decided to" gives
    ("I'm trying to get certified in Kubernetes.", "certified-kubernetes"),
    ("I'm learning Japanese, so feel free to throw in some words.", "learn-japanese"),
    ("I am currently learning Go.", "learn-go"),
    ("I want to get better at system design.", "better-system-design"),
    ("I'd like to improve my SQL.", "improve-sql"),
    ("I want to become a staff engineer.", "become-staff-engineer"),
])
def test_what_the_user_studies_trains_or_tries_to_learn_for_is_a_goal(message: str,
                                                                     key: str) -> None:
    [(found, _)] = goals(message)
    assert found == key


@pytest.mark.parametrize("message", [
    "I'm trying to fix this flaky test.",  # trying to do a task: no goal
    "I want to fix this bug.",
    "I want to learn how this function works.",  # a question
    "I'm learning that tests matter.",  # a lesson
    "Are you studying for anything?",
    "My brother is studying for the bar exam.",
])
def test_trying_a_task_and_someone_elses_studies_are_no_goal(message: str) -> None:
    assert goals(message) == []


@pytest.mark.parametrize("message", [
    "From now on always use markdown tables when comparing.",  # a statement, not a goal
    "Please remember that I work on the billing team.",
    "Did you realize I decided to learn Rust?",  # a question
    "We use pnpm.",
    "",
])
def test_standing_frames_questions_and_plain_text_are_no_goal(message: str) -> None:
    assert goals(message) == []


def test_a_topic_is_a_few_content_words_never_a_cut_sentence() -> None:
    assert topic("to learn Rust this year") == "learn-rust"
    assert topic("that I need to ship v2 on 2026-03-01") == "ship"
    assert topic("to do it") is None


def test_a_goal_already_read_as_a_statement_is_dropped() -> None:
    found = reflection_candidates("I've decided to use pnpm from now on.", **WHERE)
    assert without_restated(found, ["I've decided to use pnpm from now on."]) == []
    assert without_restated(found, ["I've decided to use pnpm from now on."], ["pnpm"]) == []
    assert without_restated(found, []) == found


def test_a_goal_that_says_more_than_the_statement_read_from_its_sentence_stays() -> None:
    """A trial's "I'm studying for my AWS Solutions Architect certification" was read as
    `cloud=aws`, and the goal was dropped with it."""
    sentence = "I'm studying for my AWS Solutions Architect certification, exam is in March."
    found = reflection_candidates(sentence, **WHERE)
    assert [c.key for c in without_restated(found, [sentence], ["aws"])] == [
        "aws-solutions-architect"]


@given(st.text(max_size=300))
def test_never_raises_and_every_goal_is_in_the_vocabulary(message: str) -> None:
    for c in reflection_candidates(message, **WHERE):
        assert check(c.facet_class, c.key, c.value) is None, (c.key, c.value)
