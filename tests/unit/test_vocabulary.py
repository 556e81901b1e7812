"""The canonical vocabulary: canonical forms, and every deterministic producer held to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from habitus.events.ingest import EmailObserved, ProviderProfileSynced, TurnRecorded
from habitus.vocabulary import (
    canonical_city,
    canonical_language,
    canonical_timezone,
    canonical_tool,
    check,
    confirmation_question,
    describe,
    first_person,
    open_key_problem,
)
from habitus.vocabulary.languages import names_language
from habitus.vocabulary.roles import canonical_role
from services.producers.heuristics import SessionState, observe_turn
from services.producers.provider import provider_candidates
from services.producers.reading.reader import StatementReader
from services.producers.reflection import reflection_candidates
from services.producers.signature import signature_candidates

CORPUS = Path(__file__).parents[2] / "examples" / "eval" / "statements.jsonl"


@pytest.mark.parametrize(("text", "tag"), [
    ("German", "de"), ("Deutsch", "de"), ("allemand", "de"), ("alemán", "de"),
    ("English", "en"), ("Englisch", "en"), ("pt-BR", "pt-BR"), ("Mandarin", "zh"),
    ("short", None), ("Python", None), ("Klingon", None),
])
def test_languages_are_bcp47_tags_of_major_languages(text: str, tag: str | None) -> None:
    assert canonical_language(text) == tag


@pytest.mark.parametrize(("text", "city"), [
    ("Berlin", "Berlin"), ("Bangalore", "Bengaluru"), ("München", "Munich"),
    ("Lisboa", "Lisbon"), ("berlin", "Berlin"), ("Northwind", None), ("Sam", None),
])
def test_cities_are_geonames_names(text: str, city: str | None) -> None:
    assert canonical_city(text) == city


def test_time_zones_are_iana_and_ambiguous_abbreviations_follow_the_city() -> None:
    assert canonical_timezone("IST") == "Asia/Kolkata"
    assert canonical_timezone("IST", near="Europe/Dublin") == "Europe/Dublin"
    assert canonical_timezone("CET") == "Europe/Berlin"
    assert canonical_timezone("UTC+2") == "Etc/GMT-2"
    assert canonical_timezone("Pacific time") == "America/Los_Angeles"
    assert canonical_timezone("cst") is None  # lower-case abbreviations are prose


def test_tools_have_one_canonical_name() -> None:
    assert canonical_tool("PostgreSQL") == "postgres"
    assert canonical_tool("VS Code") == "vscode"
    assert canonical_tool("golang") == "go"
    assert canonical_tool("GitHub Actions") == "github-actions"
    assert canonical_tool("Travis CI") == "travis"


def test_check_names_what_is_wrong() -> None:
    assert check("style", "language", "de") is None
    assert "canonical" in (check("style", "language", "german") or "")
    assert "not a key" in (check("tooling", "bun-last-week", "uses") or "")
    assert check("veto", "tool=jquery", "banned") is None
    assert check("veto", "tool=whatever", "banned") is not None


@pytest.mark.parametrize("key", ["from-now-on-always-use-markdown-tables-w", "ship-v2",
                                 "goal-for-2026", "bun-last-week", "a"])
def test_open_keys_that_are_sentence_pieces_or_dates_are_refused(key: str) -> None:
    assert open_key_problem(key) is not None


def test_open_keys_of_a_few_words_pass() -> None:
    assert open_key_problem("learn-rust") is None
    assert open_key_problem("favourite_editor_theme") is None


def test_every_confirmation_question_reads_back_as_its_facet() -> None:
    """The question an agent asks is read back by the producers into the same facet."""
    reader = StatementReader()
    facets = [("style", "verbosity", "terse"), ("style", "language", "de"),
              ("style", "format", "tables"), ("style", "emoji", "none"),
              ("identity", "location", "Berlin"), ("identity", "employer", "Northwind"),
              ("tooling", "database", "postgres"), ("tooling", "package_manager", "bun"),
              ("tooling", "runtime", "bun"), ("identity", "timezone", "Asia/Kolkata"),
              ("identity", "preferred_name", "Sam"), ("style", "code", "code-first"),
              ("veto", "format=tables", "banned"), ("veto", "format=nested-bullets", "banned"),
              ("veto", "content=apologies", "banned"), ("veto", "tool=jquery", "banned"),
              ("veto", "content=disclaimers", "banned"), ("veto", "format=headings", "banned"),
              ("veto", "format=code-blocks", "banned"), ("veto", "content=caveats", "banned"),
              ("veto", "format=numbered-lists", "banned"), ("veto", "content=jargon", "banned"),
              ("tooling", "ci", "github-actions"), ("identity", "pronouns", "she/her"),
              ("identity", "email", "jo@example.org"), ("veto", "format=markdown", "banned"),
              ("veto", "content=filler", "banned"), ("style", "units", "metric"),
              ("style", "units", "imperial"), ("style", "clock", "24h"),
              ("style", "clock", "12h")]
    clauses = [first_person(describe(*f)) + "." for f in facets]
    for facet, statements in zip(facets, reader.read(clauses), strict=True):
        assert [(s.facet_class, s.key, s.value) for s in statements] == [facet]
    assert confirmation_question("style", "verbosity", "terse") == (
        "Should I remember that you prefer short answers?")
    assert confirmation_question("veto", "format=tables", "banned") == (
        "Should I remember that you don't want tables in answers?")


def test_no_deterministic_producer_emits_outside_the_vocabulary() -> None:
    texts = [json.loads(line)["text"] for line in CORPUS.read_text().splitlines()]
    texts += ["I've decided to learn Rust this year. My goal is to pass the AWS exam.",
              "From now on, always use markdown tables when you compare things."]
    out = [(s.facet_class, s.key, s.value) for found in StatementReader().read(texts)
           for s in found]
    for text in texts:
        out += [(c.facet_class, c.key, c.value) for c in reflection_candidates(
            text, session_id="s", turn_id="t", observed_at=1.0)]
    signatures = [
        "Thanks,\nPriya Raman\nStaff Data Engineer | Globex\nBengaluru, India\nIST",
        "Best,\nSam Okafor\nPlatform Team Lead\nNorthwind Traders\nBerlin, Germany\nCET",
        "Cheers,\nJo\nSent from my iPhone",
    ]
    for n, body in enumerate(signatures):
        email = EmailObserved.model_validate({
            "message_id": f"<m{n}@x>", "direction": "sent", "from": "a@x.io", "to": ["b@y.io"],
            "subject": "hi", "body": "Hello there.\n\n" + body, "sent_at": 1.0})
        out += [(c.facet_class, c.key, c.value) for c in signature_candidates(email)]
    sync = ProviderProfileSynced.model_validate({
        "toolkit": "gmail", "connection_id": "c1",
        "fields": {"name": "Priya Raman", "email": "Priya@Globex.com", "timezone": "IST",
                   "role": "Staff Data Engineer", "employer": "Globex"}})
    out += [(c.facet_class, c.key, c.value) for c in provider_candidates(sync, 1.0)]
    # the heuristics over a long session of quick corrections and shrinking messages
    state = SessionState()
    for n, text in enumerate([*texts, *["shorter please", "no bullets", "just code"] * 4]):
        turn = TurnRecorded.model_validate({
            "session_id": "s", "turn_id": f"t{n}", "channel": "web", "user_message": text,
            "assistant_message": "x" * (300 if n > 40 else 50), "user_at": 1000.0 + 20 * n,
            "assistant_at": 1005.0 + 20 * n, "previous_assistant_at": 990.0 + 20 * n})
        state, found = observe_turn(state, turn)
        out += [(c.facet_class, c.key, c.value) for c in found]
    assert {"length_ratio", "edit_window", "correction_repeat"} <= {
        c.producer for c in _all_heuristics()}
    assert len(out) > 300
    outside = [(t, check(*t)) for t in out if check(*t) is not None]
    assert outside == []


def _all_heuristics() -> list[object]:
    """Every heuristic fired at least once: a shrinking session and repeated corrections."""
    state, found = SessionState(), []
    for n in range(60):
        text = "shorter please" if n % 3 == 0 else "please explain how the cache works " * 14
        turn = TurnRecorded.model_validate({
            "session_id": "h", "turn_id": f"h{n}", "channel": "web",
            "user_message": text if n < 20 else "ok", "assistant_message": "y" * 400,
            "user_at": 5000.0 + 20 * n, "assistant_at": 5003.0 + 20 * n,
            "previous_assistant_at": 4995.0 + 20 * n})
        state, more = observe_turn(state, turn)
        found += more
    for c in found:
        assert check(c.facet_class, c.key, c.value) is None, (c.facet_class, c.key, c.value)
    return found


@pytest.mark.parametrize(("title", "role"), [
    ("Softwarearchitektin", "software architect"), ("Datenanalyst", "data analyst"),
    ("Projektleiterin", "project manager"), ("cheffe de projet", "project manager"),
    ("Lehrerin", "teacher"),
])
def test_german_compound_and_translated_titles(title: str, role: str) -> None:
    assert canonical_role(title) == role


def test_a_compound_of_an_unknown_title_is_no_role() -> None:
    assert canonical_role("Softwarebrille") is None


@pytest.mark.parametrize(("title", "role"), [
    ("cardiologist", "cardiologist"), ("pediatrician", "pediatrician"),
    ("physiotherapist", "physiotherapist"), ("senior psychiatrist", "psychiatrist"),
])
def test_a_job_word_by_its_ending_is_a_role(title: str, role: str) -> None:
    assert canonical_role(title) == role


@pytest.mark.parametrize("words", ["big fan of cardiology", "magic", "topic"])
def test_words_without_a_job_ending_are_no_role(words: str) -> None:
    assert canonical_role(words) is None


@pytest.mark.parametrize(("written", "city"), [
    ("NYC", "New York City"), ("LA", "Los Angeles"), ("SF", "San Francisco"),
])
def test_a_large_city_by_its_abbreviation_in_capitals(written: str, city: str) -> None:
    assert canonical_city(written) == city


@pytest.mark.parametrize("written", ["la", "sf", "Nyc"])
def test_an_abbreviation_not_in_capitals_is_no_city(written: str) -> None:
    assert canonical_city(written) is None


@pytest.mark.parametrize(("title", "role"), [
    ("VP of Sales", "vp of sales"), ("Head of Engineering", "head of engineering"),
    ("Senior Director of Product", "director of product"),
    ("Vice President of Marketing", "vp of marketing"), ("Chief of Staff", "chief of staff"),
    ("director of customer success", "director of customer success"),
])
def test_a_title_over_a_department_is_a_role(title: str, role: str) -> None:
    assert canonical_role(title) == role


@pytest.mark.parametrize("words", ["head of the line", "director of photography", "head"])
def test_a_title_over_no_department_is_no_role(words: str) -> None:
    assert canonical_role(words) is None


@pytest.mark.parametrize(("word", "names"), [
    ("German", True), ("Deutsch", True), ("Deutscher", True), ("Farsi", True),
    ("Svenska", True), ("Dana", False), ("Ben", False), ("Dan", False)])
def test_a_language_is_named_in_the_four_languages_or_its_own(word: str, names: bool) -> None:
    """"Dana" is Danish in Esperanto, and a person's name to everyone else."""
    assert names_language(word) is names
