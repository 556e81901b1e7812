"""`traces.search` over sealed text: the words the index keeps, the web-search syntax the
docs promise (words, "phrases", -exclusions, or), and the match and rank on opened text."""

from __future__ import annotations

from services.trace_router.search import MAX_WORD, Clause, Query, indexed, parse, rank, words


def test_words_are_runs_of_letters_and_digits_lowercased() -> None:
    assert words("Rate-limit hit: HTTP 429, it's snake_case.") == [
        "rate", "limit", "hit", "http", "429", "it", "s", "snake", "case"]
    assert words("Zoë's Straße") == ["zoë", "s", "straße"]


def test_overlong_words_get_no_term() -> None:
    long = "x" * (MAX_WORD + 1)
    assert indexed(f"short {long} short") == {"short"}


def test_parse_words_phrases_exclusions_and_or() -> None:
    q = parse('rate "too many requests" -retry or -"status page" outage')
    assert q.parts == (
        (Clause(("rate",)), Clause(("too", "many", "requests")), Clause(("retry",), True)),
        (Clause(("status", "page"), True), Clause(("outage",))),
    )
    assert q.vocabulary == ("rate", "too", "many", "requests", "retry", "status", "page",
                            "outage")
    # per part: the words it needs; the single words it excludes (a phrase is checked on text)
    assert q.needs() == [([0, 1, 2, 3], [4]), ([7], [])]


def test_punctuation_inside_a_word_makes_a_phrase() -> None:
    assert parse("rate-limit").parts == ((Clause(("rate", "limit")),),)


def test_parts_without_a_word_to_find_are_dropped() -> None:
    assert parse("-volcano").parts == ()
    assert parse("or or").parts == ()
    assert parse('"" -"x y" or plants').parts == ((Clause(("plants",)),),)
    assert parse("OR plants Or").parts == ((Clause(("plants",)),),)


def test_an_unclosed_quote_runs_to_the_end() -> None:
    assert parse('"roman empire').parts == ((Clause(("roman", "empire")),),)


def test_every_word_must_occur() -> None:
    q = parse("roman empire")
    assert rank(q, "Tell me about the Roman empire", "It fell in 476.") is not None
    assert rank(q, "Tell me about Rome", "The empire fell.") is None


def test_a_phrase_needs_its_words_adjacent_and_in_order() -> None:
    q = parse('"empire fell"')
    assert rank(q, "The Roman empire", "fell in 476.") is not None  # query and result as one
    assert rank(q, "The fell empire", "") is None
    assert rank(q, "The empire, it fell", "") is None


def test_exclusions_and_or() -> None:
    q = parse("plants -chlorophyll or volcano")
    assert rank(q, "plants", "need light") is not None
    assert rank(q, "plants", "chlorophyll") is None
    assert rank(q, "a volcano", "chlorophyll") is not None
    excluded_phrase = parse('plants -"absorbs light"')
    assert rank(excluded_phrase, "plants", "absorbs light") is None
    assert rank(excluded_phrase, "plants", "light absorbs") is not None


def test_rank_grows_with_more_of_the_words_and_more_often() -> None:
    q = parse("rate or limit")
    one = rank(q, "rate", "")
    both = rank(q, "rate limit", "")
    twice = rank(q, "rate limit", "rate")
    assert one is not None and both is not None and twice is not None
    assert 0 < one < both < twice


def test_an_empty_query_matches_nothing() -> None:
    assert rank(Query(()), "anything", "at all") is None
