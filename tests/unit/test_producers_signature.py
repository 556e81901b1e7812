"""Producer 2, email signatures (services/producers/signature.py).

Vectors from issue 4 and the anchor's derived false positives (section 1.4 of the openhuman
reference): a received email's signature, a `City, Region` line taken for a name, "Internet"
taken for "intern", `UTC+1` taken for an employer, quoted replies read as the user's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from habitus.events.ingest import EmailObserved
from services.producers import signature as sig
from services.producers.signature import SignatureFacts, parse_signature, signature_candidates
from tests.unit.test_producers_candidates import assert_valid, by_key

ALICE = (
    "Hi Bob,\n\nThe report is attached; let me know what you think.\n\n"
    "Thanks,\nAlice Johnson\nSenior Software Engineer\nAcme Corp\nSan Francisco, CA\nPST"
)


def _email(body: str, direction: str = "sent", **extra: Any) -> EmailObserved:
    doc: dict[str, Any] = {
        "message_id": "m1",
        "direction": direction,
        "from": "alice@acme.com",
        "to": ["bob@example.com"],
        "subject": "Report",
        "body": body,
        "sent_at": 1_700_000_000.0,
    }
    doc.update(extra)
    return EmailObserved.model_validate(doc)


# --------------------------------------------------------------------------- issue vectors


def test_full_signature() -> None:
    facts = parse_signature(ALICE)
    assert facts == SignatureFacts(
        name="Alice Johnson",
        role="Senior Software Engineer",
        timezone="PST",
        employer="Acme Corp",
        location="San Francisco, CA",
    )


def test_sent_email_gives_identity_candidates_with_their_confidences() -> None:
    out = by_key(assert_valid(signature_candidates(_email(ALICE))))
    assert {k: (c.value, c.confidence) for k, c in out.items()} == {
        "name": ("Alice Johnson", sig.NAME),
        "role": ("software engineer", sig.ROLE),  # canonical: seniority is not kept
        "timezone": ("America/Los_Angeles", sig.TIMEZONE),
        "employer": ("Acme Corp", sig.EMPLOYER),
        "location": ("San Francisco", sig.LOCATION),
    }
    assert (sig.NAME, sig.ROLE, sig.TIMEZONE, sig.EMPLOYER, sig.LOCATION) == (
        0.85,
        0.80,
        0.90,
        0.70,
        0.60,
    )
    for c in out.values():
        assert c.facet_class == "identity"
        assert c.cue_family == "structural"
        assert c.producer == "email_signature"
        assert c.observed_at == 1_700_000_000.0
        assert c.evidence == ({"type": "email_message", "message_id": "m1"},)


def test_received_email_gives_nothing() -> None:
    assert signature_candidates(_email(ALICE, direction="received")) == []


def test_a_city_region_line_is_no_name() -> None:
    facts = parse_signature("The meeting is on Thursday.\nSan Francisco, CA")
    assert facts.name is None
    assert facts == SignatureFacts()
    assert signature_candidates(_email("The meeting is on Thursday.\nSan Francisco, CA")) == []


def test_internet_is_no_intern() -> None:
    facts = parse_signature("Bob Smith\nInternet Explorer support")
    assert facts.role is None
    assert facts.name == "Bob Smith"


@pytest.mark.parametrize(
    "body",
    [
        "Sounds good, ship it.\n\nOn Mon, Jan 1, 2024 at 9:00 AM Bob Smith <bob@x.com> wrote:\n"
        "> Hi,\n> Bob Smith\n> Senior Engineer\n> Globex Inc\n> UTC+1",
        # attribution wrapped over two lines, quoted text without ">"
        "Sounds good.\n\nOn Mon, Jan 1, 2024 at 9:00 AM Bob Smith <\nbob@x.com> wrote:\n\n"
        "Bob Smith\nSenior Engineer\nUTC+1",
        "Sounds good.\n\n-----Original Message-----\nFrom: Bob Smith\nBob Smith\nCEO\nGlobex Inc",
        "Sounds good.\n\n________________________________\nFrom: Bob Smith <bob@x.com>\n"
        "Sent: Monday, January 1, 2024 9:00 AM\nTo: Alice\nSubject: Re: plan\n\n"
        "Bob Smith\nCEO\nGlobex LLC\nEST",
        "FYI\n\n---------- Forwarded message ---------\nFrom: Bob <bob@x.com>\nDate: Mon\n\n"
        "Bob Smith\nVP Sales\nGlobex Inc",
        "Am 01.01.2024 um 09:00 schrieb Bob Smith <bob@x.com>:\nBob Smith\nCEO\nUTC+1",
        "> Bob Smith\n> Senior Engineer\n> UTC+1",
    ],
)
def test_quoted_replies_are_ignored(body: str) -> None:
    assert parse_signature(body) == SignatureFacts()
    assert signature_candidates(_email(body)) == []


def test_own_signature_above_a_quoted_reply_is_read() -> None:
    body = (
        "Works for me.\n\nBest,\nAlice Johnson\nStaff Engineer\nAcme Corp\n\n"
        "On Tue, Feb 2, 2024 at 10:00 AM Bob Smith <bob@x.com> wrote:\n"
        "> Bob Smith\n> CEO, Globex Inc.\n> UTC+1"
    )
    facts = parse_signature(body)
    assert (facts.name, facts.role, facts.employer, facts.timezone) == (
        "Alice Johnson",
        "Staff Engineer",
        "Acme Corp",
        None,
    )


def test_utc_offset_is_a_timezone_never_an_employer() -> None:
    facts = parse_signature("Thanks,\nBob Smith\nSenior Engineer\nUTC+1")
    assert facts.timezone == "UTC+1"
    assert facts.employer is None
    assert facts.role == "Senior Engineer"
    out = by_key(assert_valid(signature_candidates(_email("Thanks,\nBob Smith\nCTO\nGMT - 5"))))
    assert out["timezone"].value == "Etc/GMT+5"  # the Etc zones count the other way
    assert "employer" not in out


# --------------------------------------------------------------------------- more vectors


def test_only_the_last_8_lines_are_read() -> None:
    body = "Alice Johnson\nSenior Engineer\n" + "\n".join(f"line {i}." for i in range(8))
    assert parse_signature(body) == SignatureFacts()


def test_location_alone_is_dropped() -> None:
    assert parse_signature("Best,\nSan Francisco, CA").location is None
    assert parse_signature("Best,\nAlice Johnson\nSan Francisco, CA").location == (
        "San Francisco, CA"
    )


def test_a_timezone_lets_a_location_through() -> None:
    facts = parse_signature("Regards,\nBerlin, Germany\nCET")
    assert (facts.timezone, facts.location, facts.name) == ("CET", "Berlin, Germany", None)


def test_pipe_separated_one_line_signature() -> None:
    facts = parse_signature("Ok\n\n--\nCarol Danvers | CTO at Stark Labs | Europe/Berlin")
    assert facts == SignatureFacts(
        name="Carol Danvers", role="CTO", timezone="Europe/Berlin", employer="Stark Labs"
    )


def test_role_with_company_after_a_comma_and_sent_from_noise() -> None:
    body = (
        "See you.\n\nBest regards,\nJean-Luc O'Brien\nHead of Platform, Acme Inc.\nGMT+2\n\n"
        "Sent from my iPhone"
    )
    assert parse_signature(body) == SignatureFacts(
        name="Jean-Luc O'Brien", role="Head of Platform", timezone="GMT+2", employer="Acme Inc."
    )


def test_single_word_name_only_right_after_a_closing() -> None:
    assert parse_signature("Cheers,\nDave").name == "Dave"
    assert parse_signature("Some text here\nDave").name is None


def test_a_region_code_is_no_company_suffix() -> None:
    facts = parse_signature("Cheers,\nDana Scully\nData Scientist\nDenver, CO")
    assert facts.employer is None
    assert facts.location == "Denver, CO"


@pytest.mark.parametrize(
    "line",
    [
        "Best Regards",
        "Thank You",
        "Kind regards",
        "Acme Corp",
        "ACME CORP",
        "Monday Morning",
        "Dear Team",
        "Alice Johnson, PhD",
        "John Smith 555-1234",
        "alice@acme.com",
    ],
)
def test_not_names(line: str) -> None:
    assert parse_signature(f"Some body.\n{line}").name is None


@pytest.mark.parametrize(
    "line",
    [
        "I will ask the engineer tomorrow.",
        "Our designer will send it",
        "Internal tools are down",
        "International shipping",
        "See https://example.com/engineer",
        "The Lead pipeline is full",
    ],
)
def test_not_roles(line: str) -> None:
    assert parse_signature(f"Hello\n{line}").role is None


@pytest.mark.parametrize(
    ("line", "role"),
    [
        ("Product Manager", "Product Manager"),
        ("Co-Founder & CEO", "Co-Founder & CEO"),
        ("VP Engineering", "VP Engineering"),
        ("Software Engineering Intern", "Software Engineering Intern"),
        ("Principal Architect at Globex", "Principal Architect"),
    ],
)
def test_roles(line: str, role: str) -> None:
    assert parse_signature(f"Thanks,\nAlice Johnson\n{line}").role == role


def test_lowercase_timezone_words_are_prose() -> None:
    assert parse_signature("Thanks,\nAlice Johnson\nest. 1999 in the pst").timezone is None


def test_empty_body() -> None:
    assert parse_signature("") == SignatureFacts()
    assert signature_candidates(_email("")) == []


@given(st.text(max_size=600))
def test_never_raises_on_arbitrary_text(body: str) -> None:
    facts = parse_signature(body)
    for _, value, confidence in facts.found():
        assert value and value == value.strip() and 0 < confidence <= 1
    assert_valid(signature_candidates(_email(body)))


@given(
    st.lists(
        st.sampled_from(
            [
                "Thanks,",
                "Alice Johnson",
                "CTO",
                "Acme Inc",
                "Berlin, Germany",
                "UTC+1",
                "--",
                "> Bob",
                "On Mon Bob wrote:",
                "From: x",
                "Sent: y",
                "",
                "Internet",
                "hello there",
            ]
        ),
        max_size=20,
    )
)
def test_signature_like_bodies_never_raise(lines: list[str]) -> None:
    body = "\n".join(lines)
    facts = parse_signature(body)
    if facts.location is not None:
        assert facts.name or facts.role or facts.timezone or facts.employer
    assert facts.employer != "UTC+1"
    assert_valid(signature_candidates(_email(body)))
