"""Producer 5, explicit statements (services/producers/statements.py).

A table of messages and the exact facets they state, across every class, and the messages that
must state nothing: questions, quotations, hypotheticals, other people, negations, past
narrative, small talk and agent-tool edicts. Explicit evidence is the strongest cue family, so
a false facet here costs more than a missed one: the "nothing" rows matter as much as the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from habitus.events.domain import CandidateEmitted, CueFamily, FacetClass
from habitus.events.evidence import EvidenceRef
from services.producers.candidates import Candidate, is_valid_key
from services.producers.statements import (
    CONFIDENCE,
    EXPLICIT_STATEMENT,
    KEY_CHARS,
    Statement,
    find_statements,
    statement_candidates,
)

Row = tuple[str, str, str, bool]
_EVIDENCE = TypeAdapter(list[EvidenceRef])


def _found(message: str) -> set[Row]:
    return {(s.facet_class, s.key, s.value, s.standing) for s in find_statements(message)}


def _candidates(message: str) -> list[Candidate]:
    out = statement_candidates(message, session_id="s1", turn_id="t7", observed_at=42.0)
    _assert_publishable(out)
    return out


def _assert_publishable(candidates: Iterable[Candidate]) -> None:
    """What the wiring will do with each candidate must succeed: a `CandidateEmitted` payload
    with `EvidenceRef` evidence (the shared `assert_valid` knows only the older producers)."""
    for c in candidates:
        payload = CandidateEmitted.model_validate(c.as_payload())
        assert payload.class_ == FacetClass(c.facet_class)
        assert payload.cue_family == CueFamily.EXPLICIT
        assert _EVIDENCE.validate_python(list(c.evidence))
        assert is_valid_key(c.key)


def S(key: str, value: str, standing: bool = False) -> Row:
    return ("style", key, value, standing)


def V(key: str, standing: bool = False) -> Row:
    return ("veto", key, "banned", standing)


def ID(key: str, value: str, standing: bool = False) -> Row:
    return ("identity", key, value, standing)


def T(key: str, value: str, standing: bool = False) -> Row:
    return ("tooling", key, value, standing)


def C(value: str, standing: bool = False) -> Row:
    return ("channel", "primary", value, standing)


STATING: list[tuple[str, set[Row]]] = [
    # --- the brief's exact messages
    ("please keep answers short, no preamble",
     {S("verbosity", "terse", True), S("preamble", "skip", True)}),
    ("Too long. Shorter please, just code.",
     {S("verbosity", "terse"), S("format", "code-only")}),
    ("No nested bullets please.", {V("format=nested-bullets")}),
    ("Remember that I work on the billing team", {ID("team", "billing", True)}),
    # --- style: verbosity
    ("keep it short", {S("verbosity", "terse")}),
    ("Be brief.", {S("verbosity", "terse")}),
    ("I prefer shorter answers", {S("verbosity", "terse", True)}),
    ("too long", {S("verbosity", "terse")}),
    ("Shorter please", {S("verbosity", "terse")}),
    ("More detail please", {S("verbosity", "detailed")}),
    ("Please elaborate.", {S("verbosity", "detailed")}),
    ("go deeper on the second point", {S("verbosity", "detailed")}),
    ("Can you keep it short?", {S("verbosity", "terse")}),
    # --- style: preamble
    ("no preamble", {S("preamble", "skip")}),
    ("Skip the intro.", {S("preamble", "skip")}),
    ("Just get to the point!", {S("preamble", "skip")}),
    ("No fluff before the answer.", {S("preamble", "skip")}),
    # --- style: format
    ("Use bullets.", {S("format", "bullets")}),
    ("just code", {S("format", "code-only")}),
    ("code only please", {S("format", "code-only")}),
    ("Tables please.", {S("format", "tables")}),
    ("Write it in prose.", {S("format", "prose")}),
    ("no bullet points", {S("format", "prose")}),
    ("Please don't use bullets.", {S("format", "prose")}),
    # --- style: emoji
    ("No emoji.", {S("emoji", "none")}),
    ("no emojis please", {S("emoji", "none")}),
    ("Emoji are fine.", {S("emoji", "ok")}),
    ("Feel free to use emoji", {S("emoji", "ok")}),
    # --- style: language
    ("Answer in German.", {S("language", "german")}),
    ("reply in French", {S("language", "french")}),
    ("Respond in Spanish please", {S("language", "spanish")}),
    ("Could you answer in Japanese?", {S("language", "japanese")}),
    # --- style: tone
    ("Be more formal.", {S("tone", "formal")}),
    ("keep it casual", {S("tone", "casual")}),
    ("Be friendly", {S("tone", "friendly")}),
    ("Be blunt with me.", {S("tone", "direct")}),
    ("more direct please", {S("tone", "direct")}),
    # --- standing framing shared by the whole sentence
    ("From now on, answer in German and no emoji",
     {S("language", "german", True), S("emoji", "none", True)}),
    ("Always use bullets", {S("format", "bullets", True)}),
    ("Going forward, be brief.", {S("verbosity", "terse", True)}),
    ("In every answer, skip the intro.", {S("preamble", "skip", True)}),
    ("All replies in English please.", {S("language", "english", True)}),
    ("Never suggest jQuery again.", {V("tool=jquery", True)}),
    # --- veto
    ("don't use lodash", {V("tool=lodash")}),
    ("Never suggest jQuery", {V("tool=jquery")}),
    ("Stop using var.", {V("tool=var")}),
    ("Avoid global state", {V("practice=global-state")}),
    ("I don't use pnpm anymore", {V("tool=pnpm")}),
    ("I no longer use Yarn.", {V("tool=yarn")}),
    ("We stopped using MongoDB", {V("tool=mongodb")}),
    ("Please don't recommend PostgreSQL", {V("tool=postgres")}),
    ("don't use lodash or underscore", {V("tool=lodash"), V("tool=underscore")}),
    ("No disclaimers.", {V("content=disclaimers")}),
    ("Don't use nested bullets.", {V("format=nested-bullets")}),
    # --- identity
    ("My name is Ada Lovelace.", {ID("name", "Ada Lovelace")}),
    ("Please call me Ada", {ID("preferred_name", "Ada")}),
    ("I'm in Berlin", {ID("location", "Berlin")}),
    ("I live in New York", {ID("location", "New York")}),
    ("I\u2019m based in Lisbon.", {ID("location", "Lisbon")}),
    ("I'm in PST", {ID("timezone", "PST")}),
    ("My timezone is Europe/Berlin", {ID("timezone", "Europe/Berlin")}),
    ("I'm on UTC+2", {ID("timezone", "UTC+2")}),
    ("I work at Acme", {ID("employer", "Acme")}),
    ("I work as a data engineer", {ID("role", "data engineer")}),
    ("I'm a data engineer", {ID("role", "data engineer")}),
    ("My role is data engineer", {ID("role", "data engineer")}),
    ("I'm a senior backend developer at Initech",
     {ID("role", "senior backend developer"), ID("employer", "Initech")}),
    ("I work on the billing team", {ID("team", "billing")}),
    ("Please remember my name is Grace Hopper", {ID("name", "Grace Hopper", True)}),
    # --- tooling
    ("I use pnpm", {T("package_manager", "pnpm")}),
    ("We use Postgres.", {T("database", "postgres")}),
    ("we're on Rust", {T("lang", "rust")}),
    ("Our stack is Astro and Bun.", {T("framework", "astro"), T("runtime", "bun")}),
    ("We use PostgreSQL 16", {T("database", "postgres")}),
    ("I use Neovim for everything", {T("editor", "neovim")}),
    ("We use React with TypeScript", {T("framework", "react"), T("lang", "typescript")}),
    ("we use Foobarizer", {T("foobarizer", "uses")}),
    ("I'm on macOS", {T("os", "macos")}),
    ("We've switched to uv.", {T("package_manager", "uv")}),
    # --- channel
    ("Email me instead.", {C("email")}),
    ("reach me on Slack", {C("slack")}),
    ("Ping me on Telegram", {C("telegram")}),
    ("text me", {C("sms")}),
    ("Don't forget that I'm in CET", {ID("timezone", "CET", True)}),
    ("I work at Acme as a data engineer", {ID("employer", "Acme"), ID("role", "data engineer")}),
    ("I live in Frankfurt am Main", {ID("location", "Frankfurt am Main")}),
    ("I use Python, JavaScript and Go",
     {T("lang", "python"), T("lang", "javascript"), T("lang", "go")}),
    ("we're a Rust shop", {T("lang", "rust")}),
    ("I always use vim", {T("editor", "vim", True)}),
    ("Please answer briefly", {S("verbosity", "terse")}),
    ("no emoji and go deeper", {S("emoji", "none"), S("verbosity", "detailed")}),
    ("Remember: no emoji", {S("emoji", "none", True)}),
    ("Every answer should be in German", {S("language", "german", True)}),
    ("Message me on WhatsApp", {C("whatsapp")}),
    ("Reach me at ada@example.com", {C("email")}),
    ("I said no preamble!", {S("preamble", "skip")}),
    ("I stopped using Redux", {V("tool=redux")}),
    ("I switched from yarn to pnpm", {V("tool=yarn"), T("package_manager", "pnpm")}),
    ("we don't use Docker", {V("tool=docker")}),
    ("Don't use bullets, use tables", {S("format", "tables")}),
    ("We're using Next.js and Tailwind", {T("framework", "next.js"), T("framework", "tailwind")}),
    ("I'm using C++ and C#", {T("lang", "c++"), T("lang", "c#")}),
    ("Our backend is Django", {T("framework", "django")}),
    ("Could you be more formal?", {S("tone", "formal")}),
    ("Shorter answers please, and use bullets",
     {S("verbosity", "terse", True), S("format", "bullets", True)}),
    # --- several sentences
    ("Thanks! I use pnpm. Also, no emoji.",
     {T("package_manager", "pnpm"), S("emoji", "none")}),
]

NOTHING: list[str] = [
    # questions about what the user should do, or asking for information
    "Should I use pnpm?",
    "Do you use bullets?",
    "What's the best way to keep it short?",
    "why not bullets?",
    "Is it better to use Postgres or MySQL?",
    # quotations, code, blockquotes
    "my friend says 'no preamble'",
    'The docs say "don\'t use lodash".',
    "> no preamble",
    "Run `no emoji` as the flag",
    "```\nno preamble\nI use pnpm\n```",
    # hypotheticals and intentions
    "if I used pnpm it would be faster",
    "Suppose we were on Rust.",
    "I might switch to yarn",
    "Maybe I'll use Bun next year",
    "I'm thinking about using Deno",
    # other people
    "My manager uses Windows.",
    "Sarah's name is Sarah Connor.",
    "He works at Acme.",
    "My colleague says no emoji",
    # negations that assert nothing
    "I don't know what to use",
    "I'm not in Berlin right now.",
    "Don't call me Ada",
    # past narrative
    "I used to work at Acme.",
    "We used to use yarn.",
    # small talk
    "Hi there, how are you?",
    "Thanks, that worked!",
    "No problem.",
    "No worries, take your time.",
    "ok",
    "",
    "   \n\t ",
    # agent-tool edicts are another component's
    "Never email Sarah at sarah@example.com.",
    "Don't run shell commands with sudo.",
    "No meetings on Fridays.",
    "Don't use sudo.",
    "Don't mention Sarah.",
    "Email me the report",
    # things that only look like a statement
    "I'm in a meeting",
    "I'm a big fan of this",
    "I work on the billing service",
    "There are no emoji here",
    "Return the shorter string",
    "Don't use so many bullets",
    "No more than three bullets please",
    "We don't use Postgres yet",
    "they don't use lodash",
    "He said: keep it short",
    "I'm not a data engineer",
    "No, that's wrong.",
    "no idea why it fails",
    "That's an elaborate setup",
    "Please give me a more direct route",
    "Write a poem in French",
    "call me tomorrow",
    "Call me when it's done",
    "Don't suggest Sarah",
    "no deploys on Friday",
    "Never book flights on Ryanair",
    "I use it every day",
    "I run marathons",
    "I'm on vacation",
]


@pytest.mark.parametrize(("message", "expected"), STATING)
def test_stated_preferences(message: str, expected: set[Row]) -> None:
    assert _found(message) == expected


@pytest.mark.parametrize("message", NOTHING)
def test_nothing_stated(message: str) -> None:
    assert find_statements(message) == []
    assert _candidates(message) == []


def test_the_table_is_large_and_covers_every_class() -> None:
    assert len(STATING) + len(NOTHING) >= 80
    assert len(NOTHING) >= 25
    classes = {row[0] for _, rows in STATING for row in rows}
    assert classes == {"style", "veto", "identity", "tooling", "channel"}


# --------------------------------------------------------------------------- statements


def test_a_statement_keeps_its_sentence_as_written() -> None:
    message = "Thanks!  I   use pnpm.\nAlso, no emoji\u2019s fine?  No emoji."
    [pnpm, emoji] = find_statements(message)
    assert pnpm == Statement("tooling", "package_manager", "pnpm", "I use pnpm.", False)
    assert emoji.sentence == "No emoji."


def test_typographic_apostrophes_count() -> None:
    assert _found("I\u2019m in Berlin") == {ID("location", "Berlin")}
    assert _found("don\u2019t use lodash") == {V("tool=lodash")}
    assert _found("Please don\u2019t use emoji") == {S("emoji", "none")}


def test_matching_ignores_case_and_squashes_whitespace() -> None:
    assert _found("KEEP   IT\tSHORT") == {S("verbosity", "terse")}
    assert _found("i USE pnpm") == {T("package_manager", "pnpm")}


def test_matching_is_word_bounded() -> None:
    assert find_statements("I use pnpmx-tools") == [
        Statement("tooling", "pnpmx-tools", "uses", "I use pnpmx-tools", False)
    ]
    assert find_statements("nonemoji") == []
    assert find_statements("Be briefcase") == []


def test_names_keep_their_capitalisation_other_values_are_lower_case() -> None:
    assert _found("my name is Ada van der Berg") == {ID("name", "Ada van der Berg")}
    assert _found("I WORK AS A Data Engineer") == {ID("role", "data engineer")}
    assert _found("we use POSTGRES") == {T("database", "postgres")}
    assert _found("I'm in São Paulo") == {ID("location", "São Paulo")}


def test_time_zones_are_kept_as_written() -> None:
    assert _found("I'm in America/New_York") == {ID("timezone", "America/New_York")}
    assert _found("my time zone is GMT-5") == {ID("timezone", "GMT-5")}
    assert _found("I work in CET") == {ID("timezone", "CET")}


def test_a_polite_question_is_a_request_and_a_real_question_is_not() -> None:
    assert _found("Could you please not use lodash?") == {V("tool=lodash")}
    assert _found("Would you keep your replies brief?") == {S("verbosity", "terse", True)}
    assert _found("Should I keep it short?") == set()
    assert _found("Can we use pnpm?") == set()


def test_one_sentence_asking_two_values_of_one_key_states_neither() -> None:
    assert _found("Keep it short but more detail on the API") == set()
    assert _found("Too long. More detail on the API though.") == {
        S("verbosity", "terse"),
        S("verbosity", "detailed"),
    }


def test_a_hedge_is_not_a_hypothetical() -> None:
    assert _found("Keep it short if possible") == {S("verbosity", "terse")}


def test_a_quoted_object_makes_the_veto_yield_nothing() -> None:
    assert _found('Don\'t use "var".') == set()
    assert _found("Don't use `var`.") == set()
    assert _found("Don't use var.") == {V("tool=var")}


def test_a_blockquote_line_is_masked_but_the_reply_below_it_counts() -> None:
    assert _found("> I use yarn\nI use pnpm") == {T("package_manager", "pnpm")}


def test_list_items_are_sentences() -> None:
    message = "My preferences:\n- no emoji\n- answer in German\n1. I use vim"
    assert _found(message) == {
        S("emoji", "none"),
        S("language", "german"),
        T("editor", "vim"),
    }
    assert [s.sentence for s in find_statements(message)] == [
        "no emoji",
        "answer in German",
        "I use vim",
    ]


# --------------------------------------------------------------------------- splitting


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Reach me at ada@example.com. I use pnpm.",
         {C("email"), T("package_manager", "pnpm")}),
        ("See https://example.com/a.b for details. No emoji.", {S("emoji", "none")}),
        ("We use Python 3.11. Keep it short.",
         {T("lang", "python"), S("verbosity", "terse")}),
        ("We use Node v20.1.2 now", {T("runtime", "node")}),
        ("Avoid heavy libraries, e.g. lodash. Keep it short.",
         {V("practice=heavy-libraries"), S("verbosity", "terse")}),
        ("My name is Dr. Ada Lovelace", {ID("name", "Dr. Ada Lovelace")}),
        ("My name is Ada K. Lovelace", {ID("name", "Ada K. Lovelace")}),
        ("Postgres vs. MySQL is a long debate. I use Postgres.", {T("database", "postgres")}),
    ],
)
def test_sentences_do_not_split_inside_addresses_numbers_or_abbreviations(
    message: str, expected: set[Row]
) -> None:
    assert _found(message) == expected


def test_the_sentence_of_a_statement_is_whole() -> None:
    [s] = find_statements("Reach me at ada@example.com. Thanks")
    assert s.sentence == "Reach me at ada@example.com."
    [s] = find_statements("Keep it short, e.g. three lines. Thanks")
    assert s.sentence == "Keep it short, e.g. three lines."


# --------------------------------------------------------------------------- candidates


def test_candidates_carry_the_explicit_contract() -> None:
    out = _candidates("please keep answers short, no preamble")
    assert [(c.facet_class, c.key, c.value) for c in out] == [
        ("style", "verbosity", "terse"),
        ("style", "preamble", "skip"),
    ]
    for c in out:
        assert c.cue_family == "explicit"
        assert c.confidence == CONFIDENCE == 0.9
        assert c.producer == EXPLICIT_STATEMENT == "explicit_statement"
        assert c.observed_at == 42.0
        assert c.evidence == ({"type": "turn", "session_id": "s1", "turn_id": "t7"},)


def test_one_candidate_per_distinct_facet_of_a_message() -> None:
    message = "Too long. Shorter please, just code. From now on keep it short."
    assert len(find_statements(message)) == 4
    assert [(c.key, c.value) for c in _candidates(message)] == [
        ("verbosity", "terse"),
        ("format", "code-only"),
    ]


def test_candidate_ids_are_derived_and_stable() -> None:
    [a] = _candidates("I use pnpm")
    [b] = _candidates("I use pnpm")
    assert a == b
    assert a.event_id("ingest-1") == b.event_id("ingest-1") != a.event_id("ingest-2")


def test_keys_are_whole_words_never_cut() -> None:
    long_word = "x" * (KEY_CHARS + 5)
    assert find_statements(f"don't use {long_word}") == []
    [s] = find_statements("don't use extraordinarily overengineered abstractions")
    assert s.key == "practice=extraordinarily-overengineered-abstractions"
    assert len(s.key.partition("=")[2]) <= KEY_CHARS


_PHRASES = st.sampled_from(
    [
        "keep it short", "no preamble", "don't use lodash", "I use pnpm", "we're on Rust",
        "my name is Ada", "I'm in PST", "email me instead", "?", ".", "!", "\n", ", ", " and ",
        "'", '"', "`", "> ", "```", "if ", "from now on ", "never ", " again", "e.g. ", "no ",
        "I'm a ", "\u2019", "don\u2019t use ", "avoid ", "x" * 60, "Über", "@", "http://a.b/c",
    ]
)


@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(message: str) -> None:
    for s in find_statements(message):
        assert is_valid_key(s.key)
        assert s.facet_class in {"style", "veto", "identity", "tooling", "channel"}
        assert s.value and s.sentence
    _candidates(message)


@given(st.lists(st.one_of(_PHRASES, st.text(max_size=20)), max_size=25))
def test_statement_like_text_gives_valid_deterministic_deduplicated_candidates(
    parts: list[str],
) -> None:
    message = "".join(parts)
    first = _candidates(message)
    assert first == _candidates(message)
    triples = [(c.facet_class, c.key, c.value) for c in first]
    assert len(triples) == len(set(triples))
    for c in first:
        assert len(c.key) <= max(KEY_CHARS, 16)
        assert c.key == c.key.strip() and not c.key.startswith("/")


_GATE_TEXTS = st.text(
    alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz ,.!'-")), max_size=60)


@pytest.mark.parametrize("message", [m for m, _ in STATING] + NOTHING)
def test_the_style_word_gate_never_hides_a_style_pattern_match(message: str) -> None:
    from services.producers.statements import _STYLE_PATTERNS, _STYLE_WORDS, _WORD_RE

    words = set(_WORD_RE.findall(message.lower()))
    if any(p.search(message) for p, _, _ in _STYLE_PATTERNS):
        assert not _STYLE_WORDS.isdisjoint(words)


@given(_GATE_TEXTS, st.sampled_from(["keep it short", "no preamble", "answer in german",
                                     "more detail", "be more formal", "tables please"]))
def test_the_style_word_gate_passes_wherever_a_pattern_matches(noise: str, said: str) -> None:
    from services.producers.statements import _STYLE_PATTERNS, _STYLE_WORDS, _WORD_RE

    for text in (noise, f"{noise} {said}", f"{said} {noise}"):
        if any(p.search(text) for p, _, _ in _STYLE_PATTERNS):
            assert not _STYLE_WORDS.isdisjoint(_WORD_RE.findall(text.lower())), text
