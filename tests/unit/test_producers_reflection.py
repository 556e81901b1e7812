"""Producer 4, reflection cues (services/producers/reflection.py): vectors from issue 4 and the
anchor's (section 1.4 of the openhuman reference), with our slug format."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.producers.reflection import CONFIDENCE, KEY_CHARS, reflection_candidates
from tests.unit.test_producers_candidates import assert_valid


def _run(message: str) -> list[tuple[str, str]]:
    out = assert_valid(
        reflection_candidates(message, session_id="s1", turn_id="t9", observed_at=123.0)
    )
    return [(c.key, c.value) for c in out]


def test_two_cue_sentences_give_two_goals() -> None:
    msg = "I realized I prefer terse answers. Going forward, please skip the disclaimers."
    out = assert_valid(reflection_candidates(msg, session_id="s1", turn_id="t9", observed_at=123.0))
    assert [(c.key, c.value) for c in out] == [
        ("i-realized-i-prefer-terse-answers", "I realized I prefer terse answers"),
        ("going-forward-please-skip-the-disclaimer", "Going forward, please skip the disclaimers"),
    ]
    for c in out:
        assert c.facet_class == "goal"
        assert c.cue_family == "explicit"
        assert c.confidence == CONFIDENCE == 0.85
        assert c.producer == "reflection"
        assert c.observed_at == 123.0
        assert c.evidence == ({"type": "turn", "session_id": "s1", "turn_id": "t9"},)


def test_a_repeated_sentence_counts_once() -> None:
    assert _run("Remember that I work in PST. Remember that I work in PST.") == [
        ("remember-that-i-work-in-pst", "Remember that I work in PST")
    ]


def test_sentences_with_the_same_slug_count_once() -> None:
    assert len(_run("From now on, be brief!\nfrom now on be brief")) == 1


def test_key_is_a_40_char_slug_without_trailing_dash() -> None:
    [(key, value)] = _run("Going forward I want concise replies only.")
    assert key == "going-forward-i-want-concise-replies-onl"
    assert value == "Going forward I want concise replies only"
    [(key, _)] = _run("From now on: short answers, code first, tests after!")
    assert len(key) <= KEY_CHARS and not key.endswith("-")
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", key)


@pytest.mark.parametrize(
    "message",
    [
        "I realised the tests were flaky",
        "i learnt that pnpm is faster",
        "I learned to love type hints",
        "I've decided to use uv",
        "I\u2019ve decided to use uv",
        "I have decided to drop Python 3.10",
        "From now on, answer in German",
        "Please remember my cat is called Miso",
        "Remember that I am on call on Fridays",
        "I want you to remember that I use vim",
        "GOING FORWARD use metric units",
    ],
)
def test_cues_are_case_insensitive(message: str) -> None:
    assert len(_run(message)) == 1


@pytest.mark.parametrize(
    "message",
    [
        "Just a reminder that I sent the file",
        "The goings forward were slow",
        "I realize this is hard",
        "We are moving on",
        "Do you remember that I work in PST?",
        "Did I realize it was late?",
        "Remember that it runs nightly",
        "",
        "   \n\n  ",
    ],
)
def test_no_cue_no_candidate(message: str) -> None:
    assert _run(message) == []


def test_sentences_split_on_terminators_and_lines_not_inner_dots() -> None:
    msg = "Fine.\nI realized Node.js 3.5 is slow! From now on use Bun\nok?"
    assert [v for _, v in _run(msg)] == ["I realized Node.js 3.5 is slow", "From now on use Bun"]


def test_whitespace_inside_a_sentence_is_squashed() -> None:
    [(_, value)] = _run("  From   now on,\tuse tabs.  ")
    assert value == "From now on, use tabs"


@given(st.text(max_size=400))
def test_never_raises_and_every_candidate_is_valid(message: str) -> None:
    _run(message)
    _run("I realized " + message)
