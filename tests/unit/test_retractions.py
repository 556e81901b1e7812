"""What a user takes back in so many words: read as denials of exactly the values named, and
nothing read where a "forget" or "ignore" is about something else."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.producers.reading.reader import StatementReader
from services.producers.stated import statement_candidates

READER = StatementReader()
TABLES = [("veto", "format=tables", "banned", "denied"), ("style", "format", "tables", "denied")]


def read(message: str) -> list[tuple[str, str, str, str]]:
    [found] = READER.read([message])
    return [(s.facet_class, s.key, s.value, s.stance.value) for s in found]


@pytest.mark.parametrize(("message", "expected"), [
    # pointing at what the user said: everything named goes, a ban included
    ("Forget what I said about tables.", TABLES),
    ("Vergiss, was ich über Tabellen gesagt habe.", TABLES),
    ("Oublie ce que j'ai dit sur les tableaux.", TABLES),
    ("Olvida lo que dije sobre las tablas.", TABLES),
    ("Scratch what I said about pnpm.",
     [("tooling", "package_manager", "pnpm", "denied")]),
    ("Ignore my earlier request for bullet points.",
     [("style", "format", "bullets", "denied")]),
    ("Forget what I said about headers.", [("veto", "format=headings", "banned", "denied")]),
    ("Forget what I said about Slack.", [("channel", "primary", "slack", "denied")]),
    # a key without a value: each of its values
    ("Forget what I said about emojis.",
     [("style", "emoji", "none", "denied"), ("style", "emoji", "ok", "denied")]),
    # naming the thing alone
    ("Never mind the bullet points.", [("style", "format", "bullets", "denied")]),
    ("Vergiss die Tabellen.", [("style", "format", "tables", "denied")]),
    ("scratch pnpm", [("tooling", "package_manager", "pnpm", "denied")]),
    ("Forget the short answers.", [("style", "verbosity", "terse", "denied")]),
    ("Please forget what I told you about Vim.", [("tooling", "editor", "vim", "denied")]),
    ("Bitte vergiss die Tabellen.", [("style", "format", "tables", "denied")]),
    # a ban quoted from the speaker's own words is what they said, taken back
    ("I said no tables, forget that.", TABLES),
])
def test_a_retraction_denies_what_it_names(message: str,
                                           expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("forget the tables, bullets are better",
     [("style", "format", "tables", "denied"), ("style", "format", "bullets", "standing")]),
    ("Actually, forget the German, answer in English.",
     [("style", "language", "de", "denied"), ("style", "language", "en", "standing")]),
    ("Never mind the formal tone, casual is fine.",
     [("style", "tone", "formal", "denied"), ("style", "tone", "casual", "standing")]),
    ("I said Python earlier, but we use Go.",
     [("tooling", "language", "python", "denied"), ("tooling", "language", "go", "standing")]),
    ("scratch what I said about pnpm: we moved to bun last week, so use bun from now on",
     [("tooling", "package_manager", "pnpm", "denied"),
      ("tooling", "package_manager", "bun", "declared")]),
])
def test_what_is_said_in_its_place_is_read_as_before(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize("message", [
    "Ignore the typos.",  # about the message at hand
    "Disregard the attachment.",
    "Ignore the German text below.",  # a text, not the language
    "Forget the Berlin trip.",  # a trip
    "Forget it.", "Scratch that.", "Never mind.",
    "scratch or python first?",  # Scratch, the language, in a question
    "Emojis sind doch okay, vergiss meine Bitte von vorhin",  # names no value: read as before
    "Forget about React for now, focus on the backend.",  # this task, not the stack
    "Forget Docker for this one.",
    "Scratch the tables in section 2.",  # a part of a document
    "Forget the Python script, just use bash.",
])
def test_a_forget_about_something_else_takes_nothing_back(message: str) -> None:
    assert [s for s in read(message) if s[3] == "denied"] == []


@pytest.mark.parametrize(("message", "expected"), [
    # "I said X" with a complaint, an insistence or a qualification takes nothing back
    ("I said English, but you answered in German.", []),
    ("I told you I prefer tables but you keep using bullets.", []),
    ("I told you before: no emojis!", [("style", "emoji", "none", "standing")]),
    ("I said no emojis, but you keep using them.", []),
    ("I told you earlier I use Vim.", []),
    ("I said earlier I like Python, and I still do.", []),
    ("No, I said tables, but only for comparisons.", []),
    # "forget that" points at the answer before, not at what follows
    ("Forget that, tables please", [("style", "format", "tables", "standing")]),
    ("Forget that, use Python.", [("tooling", "language", "python", "standing")]),
    ("Scratch that: bullets please.", [("style", "format", "bullets", "standing")]),
    ("Never mind that, English please.", [("style", "language", "en", "standing")]),
    # for the moment only
    ("Forget about the formal tone for this email.", []),
    # German with its formal pronoun
    ("Ignorieren Sie, was ich über Tabellen gesagt habe.", TABLES),
])
def test_what_is_no_retraction_is_read_as_before(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize("message", ["Forget the pleasantries.", "Forget the headers.",
                                     "Drop the intro."])
def test_naming_a_ban_or_a_skip_alone_never_lifts_it(message: str) -> None:
    """"Forget the pleasantries" asks for none: it may not take back a wish to skip them."""
    assert [s for s in read(message)
            if s[3] == "denied" and (s[2] == "banned" or s[1] == "preamble")] == []


@pytest.mark.parametrize("message", ["Sarah hat gesagt, kurze Antworten.",
                                     "Il a dit que les tableaux sont mieux."])
def test_someone_elses_words_stay_theirs(message: str) -> None:
    """The speaker's own "j'ai dit" and "gesagt habe" are no longer taken for someone else's
    report; another person's still are."""
    assert read(message) == []


def test_a_denial_reaches_learning_as_a_denied_candidate() -> None:
    [found] = READER.read(["Forget what I said about tables."])
    candidates = statement_candidates(found, session_id="s1", turn_id="t9", observed_at=1.0)
    assert {(c.facet_class, c.key, c.value, c.stance) for c in candidates} == {
        ("veto", "format=tables", "banned", "denied"), ("style", "format", "tables", "denied")}


_words = st.sampled_from(
    ["Forget", "forget", "what", "I", "said", "about", "tables", "the", "scratch", "never",
     "mind", "Vergiss", "was", "ich", "über", "Tabellen", "gesagt", "habe", "Oublie", "ce",
     "que", "j'ai", "dit", "sur", "les", "tableaux", "I", "told", "you", "but", "meant", "pnpm",
     "German", "formal", "tone", "that", ",", ".", "!", "?", "please", "for", "this", "email"])
_texts = st.one_of(st.text(max_size=200),
                   st.lists(st.one_of(_words, st.text(max_size=5)), max_size=25).map(" ".join))


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts)
def test_reading_never_raises_and_a_denial_is_of_a_value_of_the_vocabulary(message: str
                                                                           ) -> None:
    from habitus.vocabulary import check

    for facet_class, key, value, stance in read(message):
        assert check(facet_class, key, value) is None
        if stance == "denied":
            # a denial comes only from a sentence that takes something back in words
            assert re.search(r"forget|scratch|never\s+mind|ignor|disregard|vergiss|vergessen|"
                             r"oubli|olvid|i\s+said|i\s+told\s+you", message, re.I)
