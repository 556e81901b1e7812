"""Which of the user's words lift a rule they made, and which rules they lift."""

from __future__ import annotations

import pytest

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
)


def lifted_by(message: str) -> list[str]:
    return [rule for lift in lifts(message) for rule in RULES if lifted(lift, rule)]


@pytest.mark.parametrize(("message", "expected"), [
    ("You can email Sarah again.", ["Never email Sarah at sarah@example.com."]),
    ("Forget what I said about emailing Sarah.", ["Never email Sarah at sarah@example.com."]),
    ("Thanks, that's sorted. You can email Sarah again!",
     ["Never email Sarah at sarah@example.com."]),
    ("You can call Sarah again.", ["Never call Sarah on her mobile."]),
    ("You may call Sarah again now.", ["Never call Sarah on her mobile."]),
    ("Feel free to use sudo again.", ["Don't run shell commands with sudo."]),
    ("Scratch the rule about sudo.", ["Don't run shell commands with sudo."]),
    ("You can use the browser again", ["Stop using the browser for that."]),
    ("It's fine to book Ryanair again.", ["Never book flights with Ryanair."]),
    ("ok, forget my rule about Ryanair", ["Never book flights with Ryanair."]),
    ("Du darfst Sarah wieder mailen.", ["Schreib Sarah nie Mails."]),
    ("Tu peux de nouveau écrire à Sarah.", ["N'écris jamais à Sarah."]),
    ("Ya puedes volver a escribir a Sarah.", ["Nunca le escribas a Sarah."]),
])
def test_a_lift_removes_the_rules_that_hold_every_word_it_names(
        message: str, expected: list[str]) -> None:
    assert lifted_by(message) == expected


@pytest.mark.parametrize("message", [
    "You can email Tom again.",  # no rule is about Tom
    "You can write to Sarah again.",  # writing is not calling, nor e-mail by name
    "You can email Sarah.",  # ability, or a one-off: no "again", no rule pointed at
    "Can you email Sarah again?",  # a question
    "I emailed Sarah again yesterday.",  # narrative
    "You can email Sarah again once the contract is signed.",  # a condition
    "You can only email Sarah again on Mondays.",  # a limit kept
    "Never email Sarah again.",  # the ban itself
    "Forget it.",
    "Thanks, that's all.",
])
def test_what_lifts_nothing(message: str) -> None:
    assert lifted_by(message) == []


def test_most_messages_are_passed_over_by_a_substring_check() -> None:
    assert lifts("Can you summarise the Q3 report for me?") == []
