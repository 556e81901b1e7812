"""The LLM client's pure parts: finding the JSON in an answer, reading Retry-After, and the
bounds of the backoff between retries."""

from __future__ import annotations

import email.utils

import pytest

from habitus.llm.client import backoff_wait, estimate_tokens, parse_json_content, parse_retry_after


def test_plain_json_is_parsed_whole() -> None:
    assert parse_json_content(' {"summary": "s", "facets": []}\n') == {"summary": "s",
                                                                      "facets": []}
    assert parse_json_content("[1, 2]") == [1, 2]


def test_the_first_fenced_block_is_parsed_when_the_answer_is_not_plain_json() -> None:
    content = ('Here you go:\n```json\n{"summary": "first"}\n```\nand another\n'
               '```json\n{"summary": "second"}\n```')
    assert parse_json_content(content) == {"summary": "first"}


@pytest.mark.parametrize("content", [
    '```\n{"a": 1}\n```',             # no language tag
    '```JSON\n{"a": 1}\n```',         # upper case tag
    '```json {"a": 1}```',            # all on one line
    '```json\r\n{"a": 1}\r\n```',     # CRLF
])
def test_fence_variants_models_produce(content: str) -> None:
    assert parse_json_content(content) == {"a": 1}


@pytest.mark.parametrize("content", [
    "",
    "I cannot help with that.",
    '{"summary": "truncated',
    '```json\n{"summary": nope}\n```',
    '```json\n{"a": 1}',               # fence never closed
])
def test_answers_without_json_are_refused(content: str) -> None:
    with pytest.raises(ValueError):
        parse_json_content(content)


def test_retry_after_in_seconds() -> None:
    assert parse_retry_after("7", now=0) == 7.0
    assert parse_retry_after(" 1.5 ", now=0) == 1.5
    assert parse_retry_after("-3", now=0) == 0.0


def test_retry_after_as_an_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 42, usegmt=True)
    assert parse_retry_after(header, now=now) == pytest.approx(42.0)
    past = email.utils.formatdate(now - 42, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0


@pytest.mark.parametrize("header", [None, "", "soon", "nan", "inf"])
def test_unreadable_retry_after_is_none(header: str | None) -> None:
    assert parse_retry_after(header, now=0) is None


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    top = [backoff_wait(n, base=1.0, cap=10.0, rand=lambda: 1.0) for n in range(6)]
    assert top == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_is_fully_jittered_from_zero() -> None:
    assert backoff_wait(3, base=1.0, cap=10.0, rand=lambda: 0.0) == 0.0
    assert backoff_wait(3, base=1.0, cap=10.0, rand=lambda: 0.5) == 4.0


def test_random_backoff_stays_in_bounds() -> None:
    for n in range(12):
        wait = backoff_wait(n, base=0.5, cap=30.0)
        assert wait is not None
        assert 0.0 <= wait <= min(30.0, 0.5 * 2 ** n)


def test_retry_after_is_a_floor_on_the_wait() -> None:
    assert backoff_wait(0, base=1.0, cap=30.0, retry_after=5.0, rand=lambda: 0.0) == 5.0
    # a jittered wait above the server's ask is kept
    assert backoff_wait(4, base=1.0, cap=30.0, retry_after=5.0, rand=lambda: 1.0) == 16.0


def test_a_retry_after_beyond_the_cap_gives_up() -> None:
    assert backoff_wait(0, base=1.0, cap=30.0, retry_after=30.0, rand=lambda: 0.0) == 30.0
    assert backoff_wait(0, base=1.0, cap=30.0, retry_after=31.0) is None


def test_token_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
