"""Which of the user's words lift a rule they made, and which rules they lift. A wrong lift
drops a rule the user relies on, so most cases here are what must lift nothing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.tool_memory.lifting import lifted, lifts

RULES = (
    "Never email Sarah at sarah@example.com.",
    "Never call Sarah on her mobile.",
    "Don't run shell commands with sudo.",
    "Stop using the browser for that.",
    "Never book flights with Ryanair.",
    "Schreib Sarah nie Mails.",
    "N'écris jamais à Sarah.",
    "Nunca le escribas a Sarah.",
    "Never run the tests against the production database.",
    "Never deploy on Fridays.",
    "Never run a migration without a backup.",
    "Never force push to main.",
    "Don't email anyone outside the company.",
    "Never email Sarah's manager.",
    "Never email Sarah or Tom.",
    "Never touch the product database.",
    "Never schedule a meeting with Sarah before 10am.",
)


def lifted_by(message: str) -> list[str]:
    return [rule for lift in lifts(message) for rule in RULES if lifted(lift, rule)]


@pytest.mark.parametrize(("message", "expected"), [
    ("You can email Sarah again.", ["Never email Sarah at sarah@example.com."]),
    ("Forget what I said about emailing Sarah.", ["Never email Sarah at sarah@example.com."]),
    ("Forget what I said about not emailing Sarah.",
     ["Never email Sarah at sarah@example.com."]),
    ("Thanks, that's sorted. You can email Sarah again!",
     ["Never email Sarah at sarah@example.com."]),
    ("You can call Sarah again.", ["Never call Sarah on her mobile."]),
    ("You may call Sarah again now.", ["Never call Sarah on her mobile."]),
    ("Scratch the rule about sudo.", ["Don't run shell commands with sudo."]),
    ("It's fine to book Ryanair again.", ["Never book flights with Ryanair."]),
    ("ok, forget my rule about Ryanair", ["Never book flights with Ryanair."]),
    ("You can deploy on Fridays again.", ["Never deploy on Fridays."]),
    ("Du darfst Sarah wieder mailen.", ["Schreib Sarah nie Mails."]),
    ("Tu peux de nouveau écrire à Sarah.", ["N'écris jamais à Sarah."]),
    ("Ya puedes volver a escribir a Sarah.", ["Nunca le escribas a Sarah."]),
])
def test_a_lift_removes_the_rule_it_is_about(message: str, expected: list[str]) -> None:
    assert lifted_by(message) == expected


@pytest.mark.parametrize("message", [
    # a ban said again, with a negation
    "You can never email Sarah again.", "You may not email Sarah again.",
    "You can not email Sarah again.", "Du darfst Sarah nie wieder mailen.",
    "Du darfst Sarah nicht wieder mailen.",
    # a task retried: nothing named
    "Tests fixed. You can run the tests again.", "Build is green. You can deploy again.",
    "Go ahead and run the migration again.", "You can push again.",
    "Okay, you can email her again", "Feel free to use sudo again.",
    # no rule is about them, or not only about them
    "You can email Tom again.", "You can write to Sarah again.",
    "You can touch the production database again.",
    # an ordinary task, not a rule pointed at
    "Please cancel my request for a meeting with Sarah.",
    # a ban said beside the lift
    "Forget what I said about Sarah, never email her before 9.",
    # no "again", a question, narrative, a condition, a limit, the ban itself
    "You can email Sarah.", "Can you email Sarah again?", "I emailed Sarah again yesterday.",
    "You can email Sarah again once the contract is signed.",
    "You can only email Sarah again on Mondays.", "Never email Sarah again.",
    "Forget it.", "Thanks, that's all.",
])
def test_what_lifts_nothing(message: str) -> None:
    assert lifted_by(message) == []


def test_a_lift_leaves_a_rule_about_someone_else_or_someone_more() -> None:
    """"You can email Sarah again" is not about Sarah's manager, nor about Tom; a qualifier of
    the ban on Sarah goes with it."""
    [lift] = lifts("You can email Sarah again.")
    assert not lifted(lift, "Never email Sarah's manager.")
    assert not lifted(lift, "Never email Sarah or Tom.")
    assert lifted(lift, "Never email Sarah.")
    assert lifted(lift, "Never email Sarah at sarah@acme.io without asking me first.")
    assert not lifted(lift, "Never email Sarah about the merger before the board meets.")


def test_two_forms_of_a_word_are_one_and_a_shared_beginning_is_not() -> None:
    [lift] = lifts("Forget what I said about the production database.")
    assert lifted(lift, "Never touch the production database.")
    assert not lifted(lift, "Never touch the product database.")


def test_most_messages_are_passed_over_by_a_substring_check() -> None:
    assert lifts("Can you summarise the Q3 report for me?") == []


def test_quoted_and_fenced_words_are_not_the_users() -> None:
    assert lifts("> You can email Sarah again.\nThanks for the draft.") == []
    assert lifts("```\nyou can email Sarah again\n```") == []


_words = st.sampled_from(
    ["You", "can", "may", "again", "email", "Sarah", "Tom", "never", "not", "forget", "what",
     "I", "said", "about", "the", "rule", "sudo", "run", "tests", "her", "'s", ",", ".", "?",
     "Du", "darfst", "wieder", "mailen", "only", "once", "```", "> ", "\n", "scratch"])
_texts = st.one_of(st.text(max_size=200),
                   st.lists(st.one_of(_words, st.text(max_size=6)), max_size=30).map(" ".join))
_names = st.sampled_from(["Sarah", "Tom", "Ryanair", "Maria"])


@hsettings(max_examples=300, deadline=None)
@given(_texts, _texts)
def test_lifting_never_raises_and_never_lifts_with_a_negation(message: str, rule: str) -> None:
    for lift in lifts(message):
        assert lift.words and all(w == w.lower() for w in lift.words)
        lifted(lift, rule)  # never raises
        if not lift.pointed:
            assert not re.search(r"\b(?:never|not|nie|nicht)\b|n't\b", lift.sentence, re.I)


@hsettings(max_examples=200, deadline=None)
@given(_names, _names, st.sampled_from(["email", "call", "book"]))
def test_a_permission_never_lifts_a_rule_naming_someone_it_did_not(
        named: str, other: str, verb: str) -> None:
    [lift] = lifts(f"You can {verb} {named} again.")
    assert lifted(lift, f"Never {verb} {named}.")
    assert lifted(lift, f"Never {verb} {named} or {other}.") == (named == other)
    assert not lifted(lift, f"Never {verb} {named}'s manager.")
