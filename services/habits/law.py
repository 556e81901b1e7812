"""A tenant's law: the document every habit is checked against before it may guide anyone.

The built-in denylist holds for every tenant, whether or not they wrote a law: a habit that
would turn off safety checks, leak secrets, skip redaction or approval, rewrite the agent's
own instruction files or steer the review machinery is never acceptable guidance, and a
tenant should not have to remember to forbid it. A law adds its own `deny: <regex>` lines on
top; it can narrow what is allowed, never widen it.

An absent law is the empty document, so `ABSENT_LAW_HASH` is the hash of "" and an empty law
file is the same document as none. Each habit records the hash of the law it was checked
against, and the selector uses only habits whose hash is the current one: editing the law
(even writing a first one) puts every habit back behind a recheck.

The patterns run over "condition\\nbehavior" with `.` matching the line break, so a forbidden
phrase split between the two fields is still seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.habits.identity import sha256

MAX_LAW_BYTES = 1_000_000
ABSENT_LAW_HASH = sha256("")

_FLAGS = re.IGNORECASE | re.DOTALL

#: (name, pattern). `law` is a whole word (also `laws`, `law.md`), so "write a note for the
#: lawyer" is not an attempt on the law.
DENYLIST: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("bypass_safety", re.compile(r"\b(?:ignore|bypass|disable)\b.*\bsafety", _FLAGS)),
    ("reveal_secret", re.compile(r"\b(?:reveal|store)\b.*\bsecret", _FLAGS)),
    ("skip_redaction", re.compile(r"\bskip\b.*\bredaction", _FLAGS)),
    ("bypass_approval", re.compile(r"\bbypass\b.*\bapproval", _FLAGS)),
    (
        "write_instructions",
        re.compile(r"\bwrite\b.*\b(?:agents\.md|claude\.md|law(?:s|\.md)?\b)", _FLAGS),
    ),
    (
        "enable_without_approval",
        re.compile(r"\benable\b.*\b(?:timer|live)\b.*\bwithout\b.*\bapproval", _FLAGS),
    ),
    (
        "inject_review",
        re.compile(r"\binject\b.*\b(?:report|quarantine|pending[- ]review)", _FLAGS),
    ),
)

_DENY_LINE = re.compile(r"^\s*deny:\s?(.*)$", re.IGNORECASE)
#: a tenant's patterns run on every activation and law change: bounded, and without the
#: nested repetition that makes Python's backtracking matcher take exponential time
MAX_PATTERN_CHARS = 500
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*[+*{]")


@dataclass(frozen=True)
class Law:
    """A parsed law. `extra` are its own deny patterns; `lines` their 1-based line numbers."""

    text: str
    hash: str
    extra: tuple[re.Pattern[str], ...] = ()
    lines: tuple[int, ...] = ()


def parse_law(text: str | None) -> Law:
    """The law in `text` (None: no law written). Raises ValueError for a law over
    MAX_LAW_BYTES or a `deny:` line that is empty or not a valid regex: a law that cannot be
    read as written must not be read as something weaker."""
    if text is None:
        return Law("", ABSENT_LAW_HASH)
    if len(text.encode("utf-8")) > MAX_LAW_BYTES:
        raise ValueError(f"law is over {MAX_LAW_BYTES} bytes")
    extra: list[re.Pattern[str]] = []
    numbers: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _DENY_LINE.match(line)
        if match is None:
            continue
        source = match.group(1).strip()
        if not source:
            raise ValueError(f"law line {number}: empty deny pattern")
        if len(source) > MAX_PATTERN_CHARS:
            raise ValueError(f"law line {number}: a deny pattern is at most "
                             f"{MAX_PATTERN_CHARS} characters")
        if _NESTED_REPEAT.search(source):
            raise ValueError(f"law line {number}: a repeated group that itself repeats "
                             "(like `(a+)+`) can take exponential time; write it without")
        try:
            extra.append(re.compile(source, _FLAGS))
        except re.error as error:
            raise ValueError(f"law line {number}: invalid deny pattern: {error}") from error
        numbers.append(number)
    return Law(text, sha256(text), tuple(extra), tuple(numbers))


def violations(law: Law, condition: str, behavior: str) -> list[str]:
    """The names of every pattern the habit matches: built-in names, then `law:<line>`."""
    subject = f"{condition}\n{behavior}"
    found = [name for name, pattern in DENYLIST if pattern.search(subject)]
    found.extend(
        f"law:{number}"
        for pattern, number in zip(law.extra, law.lines, strict=True)
        if pattern.search(subject)
    )
    return found
