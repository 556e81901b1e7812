"""Producer 2: identity facts from the signature of an email the user sent.

Only sent mail is read: the signature under a received email belongs to its sender, and
learning it as the user's identity is exactly the mistake a profile must never make. For the
same reason quoted replies and forwarded blocks are removed before anything is read: they carry
other people's signatures too.

The rules are deliberately conservative, because identity facts are rendered to the user and
injected into prompts: every keyword is matched on word boundaries ("Internet" is not "intern"),
a `City, Region` line is never a name, a timezone is never an employer, and a location is only
kept when something stronger shows that the lines really are a signature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from habitus.events.domain import CueFamily, FacetClass
from habitus.events.ingest import EmailObserved
from services.producers.candidates import (
    EMAIL_SIGNATURE,
    Candidate,
    canonical_identity,
    squash_spaces,
)

# Confidences: how often each rule is right on real signatures, roughly; a timezone
# abbreviation is rarely anything else, a line guessed as an employer often is.
NAME = 0.85
ROLE = 0.80
TIMEZONE = 0.90
EMPLOYER = 0.70
LOCATION = 0.60

#: how many non-empty lines at the end of the user's own text are read
WINDOW_LINES = 8
#: signature fields are short; a longer line is prose, not a title or a company
MAX_FIELD_CHARS = 80
MAX_FIELD_WORDS = 8

_REPLY_VERBS = r"(?:wrote|schrieb|a\s+écrit|escribió|ha\s+scritto|schreef|skrev)"
_ATTRIBUTION_START_RE = re.compile(r"(?:on|am|le|el|il|op|den)\s", re.IGNORECASE)
_ATTRIBUTION_RE = re.compile(
    rf"(?:on|am|le|el|il|op|den)\s.*\b{_REPLY_VERBS}\b.*:\s*", re.IGNORECASE | re.DOTALL
)
_ORIGINAL_RE = re.compile(
    r"-{2,}\s*(?:original\s+message|forwarded\s+message|begin\s+forwarded\s+message)\s*:?\s*-*",
    re.IGNORECASE,
)
_HEADER_FROM_RE = re.compile(r"from:\s*\S", re.IGNORECASE)
_HEADER_NEXT_RE = re.compile(r"(?:sent|date):", re.IGNORECASE)

_SEPARATOR_RE = re.compile(r"[-_=*~]{2,}")
_NOISE_RE = re.compile(
    r"(?:sent\s+from\s+my\b|sent\s+from\s+\w+\s+for\s+|get\s+outlook\s+for\b)", re.IGNORECASE
)
_CLOSING_RE = re.compile(
    r"(?:thanks|thank\s+you|thx|many\s+thanks|thanks\s+again|thanks\s+so\s+much|cheers|best|"
    r"best\s+regards|best\s+wishes|all\s+the\s+best|kind\s+regards|warm\s+regards|"
    r"warmest\s+regards|regards|sincerely|yours\s+sincerely|yours\s+truly|cordially|"
    r"respectfully|take\s+care|talk\s+soon)\s*[,.!]?",
    re.IGNORECASE,
)
_SEGMENT_SPLIT_RE = re.compile(r"\s+[|•·]\s+")

_ROLE_RE = re.compile(
    r"\b(?:(?:co-?)?founder|engineer|developer|programmer|designer|manager|director|architect|"
    r"researcher|scientist|analyst|consultant|recruiter|intern|president|vice\s+president|"
    r"vp|svp|evp|head\s+of|lead|principal|c[eotfipm]o|ciso|officer|specialist|coordinator|"
    r"administrator|strategist|editor|attorney|counsel|professor|lecturer|partner|advisor|"
    r"adviser)\b",
    re.IGNORECASE,
)
_ROLE_AT_RE = re.compile(r"\s+(?:at|@)\s+", re.IGNORECASE)

# Timezone abbreviations are matched case-sensitively: "est" or "Cst" in prose is not a zone.
_TZ_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:UTC|GMT)(?:\s?[+\-\u2212]\s?\d{1,2}(?::?[0-5]\d)?)?|PST|PDT|MST|MDT|CST|"
    r"CDT|EST|EDT|AKST|AKDT|HST|CET|CEST|EET|EEST|BST|IST|JST|KST|AEST|AEDT|ACST|AWST|NZST|"
    r"NZDT|SGT|HKT)(?![A-Za-z0-9])"
    r"|\b(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific)"
    r"/[A-Za-z_]+(?:/[A-Za-z_]+)?\b"
)

# Two-letter suffixes ("AG", "SA", "NV", "AB", "CO") are left out: they are also regions
# ("Denver, CO"), and a place taken for a company is worse than a company missed.
_COMPANY_SUFFIXES = frozenset(
    "inc llc llp ltd limited corp corporation company gmbh plc pty srl labs group".split()
)
_CO_RE = re.compile(r"(?<![A-Za-z])(?:&\s*)?Co\.(?!\S)")
_SUFFIX_ABBREVIATIONS = frozenset({"inc", "ltd", "corp", "co", "jr", "sr"})
#: words that show a line is a greeting, a closing, a date or a contact label, never a name
_NOT_NAME_WORDS = (
    frozenset(
        (
            "thanks thank thx regards best cheers sincerely cordially respectfully wishes yours "
            "truly hi hello dear hey greetings kind warm warmest many talk soon sent from the "
            "team monday tuesday wednesday thursday friday saturday sunday january february "
            "march july september october november december confidential mobile phone office "
            "tel fax email"
        ).split()
    )
    | _COMPANY_SUFFIXES
)
#: lowercase words allowed inside a name ("Ludwig van Beethoven")
_NAME_PARTICLES = frozenset("van von der den de da di del la le bin".split())
#: words of a sentence, not of a title or a company name
_SENTENCE_WORDS = frozenset(
    (
        "i i'm im we we're you my our your me us is are was were will would can could should "
        "please let know"
    ).split()
)


@dataclass(frozen=True)
class SignatureFacts:
    """What a signature says about its author; None where it says nothing."""

    name: str | None = None
    role: str | None = None
    timezone: str | None = None
    employer: str | None = None
    location: str | None = None

    def found(self) -> list[tuple[str, str, float]]:
        """(facet key, value, confidence) for each fact present, in a stable order."""
        pairs = (
            ("name", self.name, NAME),
            ("role", self.role, ROLE),
            ("timezone", self.timezone, TIMEZONE),
            ("employer", self.employer, EMPLOYER),
            ("location", self.location, LOCATION),
        )
        return [(key, value, conf) for key, value, conf in pairs if value]


# --------------------------------------------------------------------------- own text


def _starts_reply(lines: list[str], i: int) -> bool:
    """Whether line `i` opens a quoted or forwarded message (everything from it on is not the
    user's own text). Attributions wrapped over up to three lines are recognised."""
    line = lines[i].strip()
    if _ORIGINAL_RE.fullmatch(line):
        return True
    if _HEADER_FROM_RE.match(line):
        following = (nxt.strip() for nxt in lines[i + 1 : i + 5])
        return any(_HEADER_NEXT_RE.match(nxt) for nxt in following)
    if _ATTRIBUTION_START_RE.match(line) is None:
        return False
    joined = line
    for k in range(3):
        if k:
            if i + k >= len(lines):
                break
            joined = f"{joined} {lines[i + k].strip()}"
        if len(joined) > 400:
            break
        if _ATTRIBUTION_RE.fullmatch(joined):
            return True
    return False


def own_lines(body: str) -> list[str]:
    """The user's own lines of `body`: quoted lines ("> ...") dropped, and everything from the
    first reply attribution or original-message header on cut off."""
    lines = body.splitlines()
    kept: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if _starts_reply(lines, i):
            break
        if stripped.startswith(">"):
            continue
        kept.append(stripped)
    return kept


def _signature_block(lines: list[str]) -> tuple[list[str], bool]:
    """The last `WINDOW_LINES` meaningful lines, narrowed to what follows the last closing
    ("Thanks,") or "--" delimiter inside them, and whether such a boundary was found.

    Narrowing keeps the last sentences of the message body out of the facts whenever the
    signature is marked, which it almost always is.
    """
    entries: list[str] = []
    boundaries: list[int] = []
    for line in lines:
        if _SEPARATOR_RE.fullmatch(line):
            boundaries.append(len(entries))
            continue
        if _NOISE_RE.match(line):
            continue
        entries.append(line)
        if _CLOSING_RE.fullmatch(line):
            boundaries.append(len(entries))
    start = max(0, len(entries) - WINDOW_LINES)
    inside = [b for b in boundaries if start <= b < len(entries)]
    if inside:
        return entries[inside[-1] :], True
    return entries[start:], False


# --------------------------------------------------------------------------- line tests


def _words(line: str) -> list[str]:
    return line.split()


def _bare(word: str) -> str:
    return word.lower().strip(".,;:!?()[]\"'")


def _has_link(line: str) -> bool:
    lowered = line.lower()
    return "@" in line or "://" in lowered or "www." in lowered


def _is_sentence(line: str) -> bool:
    """A line of prose: it ends like a sentence or uses a word no title or company uses."""
    if line.endswith(("?", "!")):
        return True
    words = _words(line)
    if line.endswith(".") and words and _bare(words[-1]) not in _SUFFIX_ABBREVIATIONS:
        return not re.fullmatch(r"[^\W\d_]\.", words[-1])
    return any(_bare(w) in _SENTENCE_WORDS for w in words)


def _is_field_line(line: str) -> bool:
    """Short enough, and free of links and prose, to be one field of a signature."""
    return (
        len(line) <= MAX_FIELD_CHARS
        and len(_words(line)) <= MAX_FIELD_WORDS
        and not _has_link(line)
        and not _is_sentence(line)
    )


def _has_company_suffix(line: str) -> bool:
    return _CO_RE.search(line) is not None or any(
        _bare(w) in _COMPANY_SUFFIXES for w in _words(line)
    )


def _name_word(word: str) -> bool:
    """A capitalised word of letters, optionally joined by ' or - ("O'Brien", "Jean-Luc",
    "McKay"), or an initial ("J."). All-caps words ("PST", "CA", "CTO") are not names."""
    if re.fullmatch(r"[^\W\d_]\.", word):
        return word[0].isupper()
    parts = re.split("['\u2019\\-]", word)
    if not all(part.isalpha() for part in parts):
        return False
    return word[0].isupper() and not (len(word) > 1 and word.isupper())


def _is_name(line: str, *, allow_single: bool) -> bool:
    """A person's name: 2 to 4 capitalised words (1 only right after a closing line), with no
    digits, commas or links, and nothing that reads as a title, a zone, a company or a date.
    The comma rule is what keeps "San Francisco, CA" from being taken for a name."""
    if any(ch.isdigit() for ch in line) or any(ch in line for ch in ",;:"):
        return False
    if _has_link(line) or _ROLE_RE.search(line) or _TZ_RE.search(line):
        return False
    words = _words(line)
    if not (2 <= len(words) <= 4 or (allow_single and len(words) == 1 and len(line) >= 2)):
        return False
    if line.endswith(".") and not re.fullmatch(r"[^\W\d_]\.", words[-1]):
        return False
    if any(_bare(w) in _NOT_NAME_WORDS for w in words):
        return False
    for pos, word in enumerate(words):
        particle = 0 < pos < len(words) - 1 and word in _NAME_PARTICLES
        if not (particle or _name_word(word)):
            return False
    return True


def _is_location(line: str) -> bool:
    """A `City, Region` (or `City, Region, Country`) line of capitalised words, no digits."""
    parts = [part.strip() for part in line.split(",")]
    if not 2 <= len(parts) <= 3:
        return False
    for part in parts:
        if not 2 <= len(part) <= 30 or not part[0].isupper():
            return False
        if not re.fullmatch(r"[^\W\d_]+(?:[ .'\-]+[^\W\d_]+)*\.?", part):
            return False
        if len(part.split()) > 4 or any(_bare(w) in _NOT_NAME_WORDS for w in part.split()):
            return False
    return True


def _is_org(line: str) -> bool:
    """Could this line name an organisation? Never a timezone ("UTC+1"), a place, a title,
    a phone number or a closing."""
    if not _is_field_line(line) or len(_words(line)) > 6:
        return False
    if _TZ_RE.search(line) or _ROLE_RE.search(line) or _CLOSING_RE.fullmatch(line):
        return False
    if sum(ch.isdigit() for ch in line) >= 5:
        return False
    if sum(ch.isalpha() for ch in line) < 2 or not (line[0].isupper() or line[0].isdigit()):
        return False
    return _has_company_suffix(line) or not _is_location(line)


def _clean(value: str) -> str:
    return squash_spaces(value).strip(",;|-\u2013 ").strip()


def _split_role(line: str) -> tuple[str, str | None] | None:
    """The role on a field line and, for "Engineer at Acme" / "CTO, Acme Inc.", the employer."""
    if not _is_field_line(line):
        return None
    at = _ROLE_AT_RE.search(line)
    if at is not None:
        left, right = line[: at.start()], line[at.end() :]
        if _ROLE_RE.search(left) and _is_org(_clean(right)):
            return _clean(left), _clean(right)
    if "," in line:
        left, right = line.split(",", 1)
        right = _clean(right)
        if _ROLE_RE.search(left) and _has_company_suffix(right) and _is_org(right):
            return _clean(left), right
    if _ROLE_RE.search(line) is None:
        return None
    role = _clean(line)
    return (role, None) if role else None


def _normalise_tz(raw: str) -> str:
    return re.sub(r"\s+", "", raw).replace("\u2212", "-")


# --------------------------------------------------------------------------- parse


def parse_signature(body: str) -> SignatureFacts:
    """The facts in the signature at the end of `body` (quoted replies removed first)."""
    block, after_boundary = _signature_block(own_lines(body))
    segments: list[str] = []
    for line in block:
        segments.extend(s for s in (_clean(x) for x in _SEGMENT_SPLIT_RE.split(line)) if s)

    used: set[int] = set()
    role: str | None = None
    employer: str | None = None
    role_idx: int | None = None
    for i, seg in enumerate(segments):
        split = _split_role(seg)
        if split is not None:
            role, employer = split
            role_idx = i
            used.add(i)
            break

    name: str | None = None
    for i, seg in enumerate(segments):
        if i not in used and _is_name(seg, allow_single=after_boundary and i == 0):
            name = seg
            used.add(i)
            break

    timezone: str | None = None
    for seg in segments:
        match = _TZ_RE.search(seg)
        if match is not None:
            timezone = _normalise_tz(match.group(0))
            break

    if employer is None:
        employer_idx: int | None = None
        nxt = role_idx + 1 if role_idx is not None else None
        if nxt is not None and nxt < len(segments) and nxt not in used and _is_org(segments[nxt]):
            employer_idx = nxt
        else:
            employer_idx = next(
                (
                    i
                    for i, seg in enumerate(segments)
                    if i not in used and _has_company_suffix(seg) and _is_org(seg)
                ),
                None,
            )
        if employer_idx is not None:
            employer = segments[employer_idx]
            used.add(employer_idx)

    location: str | None = None
    if name or role or timezone or employer:
        for i, seg in enumerate(segments):
            if i in used or _has_company_suffix(seg) or _ROLE_RE.search(seg):
                continue
            if _TZ_RE.search(seg) is None and _is_location(seg):
                location = seg
                break

    return SignatureFacts(
        name=name, role=role, timezone=timezone, employer=employer, location=location
    )


def signature_candidates(p: EmailObserved) -> list[Candidate]:
    """Identity candidates from the signature of a sent email; nothing for a received one."""
    if p.direction != "sent":
        return []
    evidence = ({"type": "email_message", "message_id": p.message_id},)
    return [
        Candidate(
            facet_class=FacetClass.IDENTITY.value,
            key=key,
            value=value,
            cue_family=CueFamily.STRUCTURAL.value,
            confidence=confidence,
            evidence=evidence,
            observed_at=p.sent_at,
            producer=EMAIL_SIGNATURE,
        )
        for key, value, confidence in canonical_identity(parse_signature(p.body).found())
    ]
