"""Redaction (services/habits/redaction.py): the digest's token list and prose list, the other
secret shapes, the capture cap, and properties over mixed text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.habits import redaction
from services.habits.redaction import (
    CUT_MARKER,
    MAX_CAPTURE_BYTES,
    REDACTED,
    capture_text,
    contains_sensitive,
    redact,
)

ZEROS24 = "0" * 24
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "-----END RSA PRIVATE KEY-----"
)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkRhbmEifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

# Fake secrets: realistic shapes and lengths, all-zero or obviously fake bodies.
SECRETS = [
    "sk-proj-0000000000000000",
    "sk-00000000000000000000000000000000",
    "sk_live_" + ZEROS24,
    "pk_test_" + ZEROS24,
    "rk_live_" + ZEROS24,
    "ghp_" + "0" * 36,
    "gho_" + "0" * 20,
    "github_pat_11AAAAAAA0000000000000_000000",
    "xoxb-00000000-00000000",
    "xoxp-0000000000-0000000000",
    "ya29.0000000000000000",
    "AKIA0000000000000000",
    "ASIA0000000000000000",
    PEM,
    JWT,
    "dana.reyes@example.com",
    "ops+alerts@mail.example.co.uk",
    "(415) 555-0100",
    "415-555-0100",
    "+1 415 555 0100",
    "415.555.0100",
    "/home/dana/notes.txt",
    "~/x",
    "/tmp/y",
    "/Users/dana/Desktop/plan.md",
    "/mnt/backup/db.sql",
    "C:\\Users\\dana\\x",
]

PROSE = [
    "taskkeepingworkflow",
    "Use risk-sensitive review before deployment",
    "pkmanagementworkflow",
    "Keep the status report to three bullet points",
    "ask before sending email to the whole team",
    "The token budget is tight today",
    "skip preamble",
    "Basic principles first, then the details",
    "Bearer tokens expire after an hour",
    "Write the password policy section in plain language",
    "Meet at 10:30 on 2024-05-01 in room 4155",
    "The homework folder and /var/log are fine to mention",
    "Use the secret santa list format",
    "See https://example.com/home/page for the style guide",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_each_secret_is_redacted(secret: str) -> None:
    text = f"Here it is: {secret} thanks"
    out = redact(text)
    assert secret not in out
    assert REDACTED in out
    assert out.startswith("Here it is: ") and out.endswith(" thanks")
    assert contains_sensitive(text)
    assert not contains_sensitive(out)


@pytest.mark.parametrize("prose", PROSE)
def test_prose_is_kept(prose: str) -> None:
    assert redact(prose) == prose
    assert not contains_sensitive(prose)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc123def456ghi", "Authorization: Bearer " + REDACTED),
        ("use Basic Ym9iOmh1bnRlcjI= here", "use Basic " + REDACTED + " here"),
        ("https://bob:hunter2@example.com/x", "https://" + REDACTED + "@example.com/x"),
        ("password = hunter2", "password = " + REDACTED),
        ('{"api_key": "abc123"}', '{"api_key": "' + REDACTED + '"}'),
        ('{"password":"x y"}', '{"password":"' + REDACTED + ' y"}'),
        ("db_password: hunter2", "db_password: " + REDACTED),
        ("export API_KEY=abc123", "export API_KEY=" + REDACTED),
        ("?token=abc&page=2", "?token=" + REDACTED + "&page=2"),
        ("secret: s3cr3t", "secret: " + REDACTED),
        ("private_key=abc", "private_key=" + REDACTED),
        ("credential:xyz", "credential:" + REDACTED),
        ("passwd=pw1", "passwd=" + REDACTED),
        ("apikey: k", "apikey: " + REDACTED),
    ],
)
def test_what_is_kept_around_a_secret(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_json_secret_values_never_survive() -> None:
    out = redact('{"password": "x", "user": "dana"}')
    assert '"x"' not in out
    assert '"user": "dana"' in out


def test_unterminated_pem_block_runs_to_the_end() -> None:
    text = "before\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    assert redact(text) == "before\n" + REDACTED


def test_a_path_behind_a_token_is_redacted_too() -> None:
    # the path only starts a match once the token before it is gone
    out = redact("sk-000000000000/home/dana/x")
    assert "/home" not in out and not contains_sensitive(out)


def test_capture_pairs_and_redacts() -> None:
    out = capture_text("mail dana@example.com the report", "Done.")
    assert out == f"User: mail {REDACTED} the report\nAssistant: Done."


def test_capture_keeps_the_tail_behind_a_marker() -> None:
    assistant = "a" * MAX_CAPTURE_BYTES + "THE END"
    out = capture_text("start", assistant)
    assert out is not None
    assert out.startswith(CUT_MARKER)
    assert out.endswith("THE END")
    assert "User: start" not in out
    assert len(out.encode("utf-8")) <= MAX_CAPTURE_BYTES


def test_capture_never_splits_a_character() -> None:
    for pad in range(4):
        assistant = "x" * pad + "\u20ac" * (MAX_CAPTURE_BYTES // 2)
        out = capture_text("", assistant)
        assert out is not None
        data = out.encode("utf-8")
        assert len(data) <= MAX_CAPTURE_BYTES
        assert data.decode("utf-8") == out
        assert "\ufffd" not in out


def test_capture_exactly_at_the_cap_is_not_cut() -> None:
    prefix = len(b"User: \nAssistant: ")
    out = capture_text("", "b" * (MAX_CAPTURE_BYTES - prefix))
    assert out is not None and not out.startswith(CUT_MARKER)
    assert len(out.encode("utf-8")) == MAX_CAPTURE_BYTES


def test_capture_cut_that_exposes_a_path_is_redacted_again() -> None:
    # "x/tmp/..." is no path (a word character precedes it), but the cut makes the kept
    # tail start at "/tmp/...", which is one
    keep = MAX_CAPTURE_BYTES - len(CUT_MARKER.encode())
    tail = "/tmp/private/file"
    assistant = "x" * 100 + tail + " " + "y" * (keep - len(tail) - 1)
    assert redact(assistant) == assistant
    out = capture_text("", assistant)
    assert out is not None
    assert out.startswith(CUT_MARKER + REDACTED + " y")
    assert "/tmp/" not in out
    assert len(out.encode()) <= MAX_CAPTURE_BYTES


_PROSE_WORDS = st.sampled_from(
    ["keep", "it", "short", "token", "budget", "risk-sensitive", "review", "/", ":", "=",
     "password", "Bearer", "Basic", "@", "~", "(", ")", "-", ".", "\n", "\"", "'", "x", "0",
     "home", "tmp", "eyJ", "sk-", "AKIA", "https://", "C:\\Users\\"]
)
_PIECES = st.one_of(st.sampled_from(SECRETS), _PROSE_WORDS, st.text(max_size=8),
                    st.sampled_from(["\u017fecret=", "\u212aey: ", "Authorization=", "Users\\",
                                     "users/", "GHP_", "xoxb-", "ya29.", "_live_", "ASIA"]))


@hsettings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.lists(st.sampled_from(["", " ", "\n", ":"]),
                                                 min_size=12, max_size=12))
def test_redacted_text_is_clean_and_stable(pieces: list[str], seps: list[str]) -> None:
    text = "".join(p + s for p, s in zip(pieces, seps, strict=False))
    once = redact(text)
    assert not contains_sensitive(once)
    assert redact(once) == once


def _every_rule_redact(text: str) -> str:
    """Redaction as it was before the substring prefilter: every pattern on every round."""
    for _ in range(8):
        cleaned = text
        for pattern, replacement in redaction._RULES:
            cleaned = pattern.sub(replacement, cleaned)
        if cleaned == text:
            return cleaned
        text = cleaned
    return text


@hsettings(max_examples=600, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.lists(st.sampled_from(["", " ", "\n", ":", "/"]),
                                                 min_size=12, max_size=12))
def test_the_prefilter_changes_nothing_redaction_does(pieces: list[str], seps: list[str]
                                                      ) -> None:
    # a rule is skipped only when the text lacks every substring it needs; the answer must be
    # what running every rule gives, including for text that is not ASCII (a long s,
    # U+017F, for the s of "secret", the Kelvin sign) and mixed case ("Authorization", "C:\Users/")
    text = "".join(p + s for p, s in zip(pieces, seps, strict=False))
    assert redact(text) == _every_rule_redact(text)
    assert contains_sensitive(text) == any(p.search(text) for p, _ in redaction._RULES)


@pytest.mark.parametrize("text", [
    "\u017fecret = hunter22", "PASSWORD: hunter22", "C:\\Users/ann/notes.txt", "see ~/notes",
    "Authorization: Bearer abc.def.ghi123", "mail ann@example.org", "call 415-555-0134",
    "AKIAABCDEFGHIJKLMNOP", "https://ann:pw@example.org/x", "-----BEGIN PRIVATE KEY-----abc",
])
def test_the_prefilter_lets_each_kind_of_secret_through_to_its_pattern(text: str) -> None:
    assert contains_sensitive(text) == any(p.search(text) for p, _ in redaction._RULES)
    assert redact(text) == _every_rule_redact(text) != text
