"""The eval harness's scoring (services/extractor/evaluate.py): value matching, the one-to-one
pairing of labels and predictions, and the precision/recall arithmetic, on hand-made cases."""

from __future__ import annotations

import json

import pytest

from services.extractor.evaluate import (
    CLASSES,
    CorpusError,
    Counts,
    Facet,
    format_ratio,
    match_facets,
    normalise_value,
    parse_corpus,
    report_json,
    score_item,
    summarise,
    values_match,
)


def F(class_: str, key: str, value: str, *alternatives: str) -> Facet:
    return Facet(class_, key, value, tuple(alternatives))


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(("raw", "normal"), [
    ("  Terse. ", "terse"),
    ("Ship   the\tbilling\nmigration!", "ship the billing migration"),
    ("\u201cNeovim\u201d", "neovim"),
    ("(pnpm)", "pnpm"),
    ("C++", "c++"),
    ("C#", "c#"),
    ("STRASSE", "strasse"),
    ("Stra\u00dfe", "strasse"),
    ("...", ""),
])
def test_normalise_value(raw: str, normal: str) -> None:
    assert normalise_value(raw) == normal


@pytest.mark.parametrize(("a", "b"), [
    ("terse", "Terse"),
    ("terse", " terse. "),
    ("Berlin marathon", "run the Berlin marathon in September"),
    ("run the Berlin marathon in September", "berlin marathon"),
    ("nested bullets", "nested-bullets"),
    ("Berlin", "Europe/Berlin"),
    ("America/Los_Angeles", "america/los_angeles"),
    ("node.js", "Node.js runtime"),
    ("don't", "I don't"),
    ("it\u2019s direct", "it's direct"),
    ("B2", "pass the German B2 exam"),
])
def test_values_that_match(a: str, b: str) -> None:
    assert values_match(a, b)
    assert values_match(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("terse", "detailed"),
    ("go", "google"),  # a word is not a prefix of a longer one
    ("rust", "trust the process"),
    ("c", "c++"),
    ("c", "c#"),
    ("berlin marathon", "marathon in berlin"),  # words must be a contiguous run, in order
    ("", ""),
    ("...", "..."),
    ("pnpm", ""),
])
def test_values_that_do_not_match(a: str, b: str) -> None:
    assert not values_match(a, b)


# --------------------------------------------------------------------------- pairing


def test_class_and_key_must_be_equal() -> None:
    expected = [F("tooling", "editor", "neovim")]
    assert match_facets(expected, [F("tooling", "editor", "Neovim")]) == [(0, 0)]
    assert match_facets(expected, [F("tooling", "ide", "neovim")]) == []
    assert match_facets(expected, [F("style", "editor", "neovim")]) == []


def test_alternatives_are_accepted_values() -> None:
    expected = [F("style", "verbosity", "terse", "concise", "short")]
    assert match_facets(expected, [F("style", "verbosity", "Concise")]) == [(0, 0)]
    assert match_facets(expected, [F("style", "verbosity", "very short answers")]) == [(0, 0)]
    assert match_facets(expected, [F("style", "verbosity", "detailed")]) == []


def test_each_expected_facet_matches_at_most_once() -> None:
    expected = [F("style", "verbosity", "terse")]
    predicted = [F("style", "verbosity", "terse"), F("style", "verbosity", "Terse.")]
    outcome = score_item("x", expected, predicted)
    assert len(outcome.matches) == 1
    assert outcome.missed == ()
    assert len(outcome.spurious) == 1


def test_pairing_is_maximal_not_greedy() -> None:
    # the first label fits both predictions, the second only the first prediction: a greedy
    # pass giving the first label the first prediction would leave the second label unmatched
    expected = [F("goal", "billing_migration", "billing migration"),
                F("goal", "billing_migration", "before March")]
    predicted = [F("goal", "billing_migration", "ship the billing migration before March"),
                 F("goal", "billing_migration", "billing migration")]
    assert match_facets(expected, predicted) == [(0, 1), (1, 0)]
    # and the order the model lists its facets in changes nothing
    assert match_facets(expected, predicted[::-1]) == [(0, 0), (1, 1)]


# --------------------------------------------------------------------------- arithmetic


def test_counts_precision_and_recall() -> None:
    assert Counts(expected=4, predicted=2, matched=1).precision == 0.5
    assert Counts(expected=4, predicted=2, matched=1).recall == 0.25
    assert Counts(expected=3, predicted=0, matched=0).precision is None
    assert Counts(expected=3, predicted=0, matched=0).recall == 0.0
    assert Counts(expected=0, predicted=2, matched=0).recall is None
    assert Counts(expected=0, predicted=2, matched=0).precision == 0.0
    assert format_ratio(None) == "n/a"
    assert format_ratio(2 / 3) == "0.67"
    assert format_ratio(1.0) == "1.00"


def test_summarise_per_class_and_overall() -> None:
    outcomes = [
        # one of two labels found, one wrong extra: style 1/1 matched, tooling 0/1 predicted
        score_item("a", [F("style", "verbosity", "terse"), F("identity", "name", "Priya")],
                   [F("style", "verbosity", "concise answers", ), F("tooling", "editor", "vim"),
                    F("style", "verbosity", "terse")]),
        # a negative that stayed clean, with one quarantined facet
        score_item("b", [], [], rejections=["quote_not_in_chunk"]),
        # a negative with a spurious facet
        score_item("c", [], [F("identity", "name", "Daniel Okafor")],
                   rejections=["identity_from_inbound", "quote_not_in_chunk"]),
        # a failed call: its label still counts against recall
        score_item("d", [F("channel", "primary", "slack")], [], failure="timeout",
                   tokens_in=10, tokens_out=0),
    ]
    report = summarise(outcomes)
    assert list(report.per_class) == list(CLASSES)
    assert report.per_class["style"] == Counts(expected=1, predicted=2, matched=1)
    assert report.per_class["identity"] == Counts(expected=1, predicted=1, matched=0)
    assert report.per_class["tooling"] == Counts(expected=0, predicted=1, matched=0)
    assert report.per_class["channel"] == Counts(expected=1, predicted=0, matched=0)
    assert report.per_class["veto"] == Counts()
    assert report.per_class["veto"].precision is None
    assert report.per_class["veto"].recall is None
    assert report.overall == Counts(expected=3, predicted=4, matched=1)
    assert report.overall.precision == 0.25
    assert report.overall.recall == pytest.approx(1 / 3)
    assert report.rejections == {"identity_from_inbound": 1, "quote_not_in_chunk": 2}
    assert report.failures == {"timeout": 1}
    assert (report.negatives, report.negatives_clean) == (2, 1)
    assert report.tokens_in == 10


def test_nothing_predicted_is_na_precision_zero_recall() -> None:
    report = summarise([score_item("a", [F("veto", "tool=lodash", "banned")], []),
                        score_item("b", [F("goal", "learn_rust", "learn Rust")], [])])
    assert report.overall.precision is None
    assert report.overall.recall == 0.0
    assert format_ratio(report.overall.precision) == "n/a"
    as_json = report_json(report, [])
    assert as_json["overall"]["precision"] is None
    json.dumps(as_json)  # serialisable as it is


# --------------------------------------------------------------------------- corpus shape


def _line(**overrides: object) -> str:
    item: dict[str, object] = {
        "id": "x", "source": "conversations",
        "material": [{"kind": "user_turn", "text": "Keep it short."}],
        "expected": [{"class": "style", "key": "verbosity", "value": "terse"}],
    }
    item.update(overrides)
    return json.dumps(item)


def test_parse_corpus_reads_items() -> None:
    items = parse_corpus([_line(), "", _line(id="y", expected=[], note="negative")])
    assert [i.id for i in items] == ["x", "y"]
    assert items[0].expected == (F("style", "verbosity", "terse"),)
    assert items[1].note == "negative"


@pytest.mark.parametrize("bad", [
    _line(source="slack"),
    _line(source="document:"),
    _line(material=[]),
    _line(material=[{"kind": "tweet", "text": "hi"}]),
    _line(expected=[{"class": "mood", "key": "x", "value": "y"}]),
    _line(expected=[{"class": "style", "key": "Verbosity", "value": "terse"}]),
    _line(expected=[{"class": "style", "key": "verbosity", "value": ""}]),
    _line(expected=[{"class": "style", "key": "verbosity", "value": "t", "alternatives": [1]}]),
    # labels validation would never store as they are: the old forms, a non-canonical
    # alternative, an open key of another shape
    _line(expected=[{"class": "style", "key": "language", "value": "german"}]),
    _line(expected=[{"class": "tooling", "key": "lang", "value": "python"}]),
    _line(expected=[{"class": "style", "key": "verbosity", "value": "terse",
                     "alternatives": ["short"]}]),
    _line(expected=[{"class": "veto", "key": "tool=npm", "value": "banned",
                     "alternatives": ["npm"]}]),
    _line(expected=[{"class": "goal", "key": "ship_by_march", "value": "ship it"}]),
    "not json",
])
def test_parse_corpus_refuses_bad_lines(bad: str) -> None:
    with pytest.raises(CorpusError):
        parse_corpus([bad])


def test_a_label_in_an_old_form_names_the_form_validation_stores() -> None:
    line = _line(expected=[{"class": "style", "key": "language", "value": "german"}])
    with pytest.raises(CorpusError, match="stored as style/language=de"):
        parse_corpus([line])
    [item] = parse_corpus([_line(expected=[
        {"class": "style", "key": "language", "value": "de"},
        {"class": "tooling", "key": "language", "value": "python"},
        {"class": "identity", "key": "name", "value": "Marta Kowalski", "alternatives": ["Marta"]},
        {"class": "tooling", "key": "orchestrator", "value": "airflow"}])])
    assert [f.label() for f in item.expected] == [
        "style/language=de", "tooling/language=python", "identity/name=Marta Kowalski",
        "tooling/orchestrator=airflow"]


def test_parse_corpus_refuses_duplicate_ids() -> None:
    with pytest.raises(CorpusError, match="duplicate"):
        parse_corpus([_line(), _line()])
