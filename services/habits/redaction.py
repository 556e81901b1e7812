"""Redaction of secrets and personal locations before any text is stored or sent to a model.

A habit is learned from conversation text, and conversation text carries whatever the person
pasted: keys, tokens, addresses, the paths of their home directory. None of that is needed to
learn a way of working, so it is replaced by `REDACTED` before the text goes anywhere.

The patterns lean towards recognisable shapes (a provider's key prefix, `name = value` with a
secret-sounding name, a `user:pass@` in a URL) rather than "anything random-looking": the
prose a habit is made of must survive unchanged, and words such as "token budget" or
"risk-sensitive" are prose. `redact` repeats until nothing more matches, because one
replacement can expose another match (a path that directly followed a token only starts a
path once the token is gone); so `redact` is idempotent and `contains_sensitive(redact(x))`
is false.

`contains_sensitive` is the post-check every writer runs on what it is about to store: a
writer refuses to store text the redaction could not clean, rather than trusting it did.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"
#: the most UTF-8 bytes of one captured exchange; longer ones keep their tail
MAX_CAPTURE_BYTES = 65536
#: the line that stands for the cut-off start of a capped exchange
CUT_MARKER = "[earlier text cut]\n"
#: a bound on redaction rounds; text that still changes after this many is refused upstream
_MAX_ROUNDS = 8

_TOKEN = r"[A-Za-z0-9_-]"
_NOT_TOKEN_BEFORE = r"(?<![A-Za-z0-9_-])"
_NOT_TOKEN_AFTER = r"(?![A-Za-z0-9_-])"

# Each entry: (pattern, replacement). A replacement keeps what names the secret (the word
# "Bearer", the key in `password = ...`, the scheme of a URL) and drops only the secret.
# `_NEEDLES` below says, for each, what text it can match must contain.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # a private key block; an unterminated one runs to the end of the text
    (
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # credentials in a URL: keep the scheme and the host, drop `user:pass`
    (
        re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:]*:[^\s/@]+@"),
        r"\1" + REDACTED + "@",
    ),
    # provider keys and tokens, recognised by their prefixes
    (re.compile(_NOT_TOKEN_BEFORE + r"sk-" + _TOKEN + r"{12,}"), REDACTED),
    (
        re.compile(_NOT_TOKEN_BEFORE + r"(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{4,}"),
        REDACTED,
    ),
    (re.compile(_NOT_TOKEN_BEFORE + r"gh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(_NOT_TOKEN_BEFORE + r"github_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(_NOT_TOKEN_BEFORE + r"xox[baprs]-[A-Za-z0-9-]{6,}"), REDACTED),
    (re.compile(_NOT_TOKEN_BEFORE + r"ya29\.[A-Za-z0-9_.-]{8,}"), REDACTED),
    (
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        REDACTED,
    ),
    # a JWT-like triple: base64url header (always starts `eyJ`), payload, signature
    (
        re.compile(_NOT_TOKEN_BEFORE + r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
        REDACTED,
    ),
    # HTTP credentials: the value must look like one (a digit or symbol, or long), since
    # "Basic principles" and "Bearer tokens expire" are prose
    (
        re.compile(
            r"(?i)\b(bearer|basic)(\s+)"
            r"(?:(?=[A-Za-z0-9._~+/-]*[0-9._~+/])[A-Za-z0-9._~+/-]{8,}|[A-Za-z0-9._~+/-]{20,})=*"
        ),
        r"\1\2" + REDACTED,
    ),
    # e-mail addresses
    (
        re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                   r"\.[A-Za-z]{2,}\b"),
        REDACTED,
    ),
    # NANP phone numbers; separators are required, so ids and timestamps are not phones
    (
        re.compile(
            r"(?<![\w+])(?:\+1[\s.-]?|1[\s.-])?(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.-])"
            r"\d{3}[\s.-]\d{4}(?!\w)"
        ),
        REDACTED,
    ),
    # `name = value` / `"name": "value"` with a secret-sounding name; the value goes
    (
        re.compile(
            r"(?i)((?<![A-Za-z0-9])"
            r"(?:api[_-]?key|apikey|secret|password|passwd|token|credential|authorization"
            r"|private[_-]?key)s?[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\[REDACTED\])(?!(?:bearer|basic)\s+\[REDACTED\])"
            r"(?:(?:bearer|basic)\s+)?[^\s\"',;&)}\[\]]+"
        ),
        r"\1" + REDACTED,
    ),
    # home and temporary directories name the person and their machine
    (
        re.compile(
            r"(?<![\w./~-])(?:~|/home|/Users|/tmp|/mnt)/[^\s\"'<>|]*"
            r"|(?<![\w])[A-Za-z]:[\\/]Users[\\/][^\s\"'<>|]*",
            re.IGNORECASE,
        ),
        REDACTED,
    ),
)


# For each rule in order, substrings one of which any match contains (in ASCII text lowered;
# None: no such cheap test, the pattern always runs). Most exchanges contain none, and a
# substring test costs a fraction of a regex scan, most of these patterns starting with a
# lookbehind that defeats the regex engine's own prefix search: capturing an exchange cost
# about a quarter millisecond, nearly all of it in these scans. Only ASCII text is filtered:
# under IGNORECASE the patterns also match letters that lower() does not map to ASCII (the
# long s, U+017F, in "secret"), so other text runs every pattern.
_NEEDLES: tuple[tuple[str, ...] | None, ...] = (
    ("-----begin",),
    ("://",),
    ("sk-",),
    ("_live_", "_test_"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"),
    ("ya29.",),
    ("akia", "asia"),
    ("eyj",),
    ("bearer", "basic"),
    ("@",),
    None,  # phone numbers: digits in many shapes
    ("key", "secret", "passw", "token", "credential", "authorization"),
    ("~/", "/home/", "users/", "users\\", "/tmp/", "/mnt/"),
)
assert len(_NEEDLES) == len(_RULES)


_GUARDED = tuple(zip(_RULES, _NEEDLES, strict=True))


def _applicable(text: str) -> list[tuple[re.Pattern[str], str]]:
    """The rules that can match `text` (every rule, for text that is not ASCII). Every
    captured exchange passes here three times, so the needles are tried by `map` over the
    lowered text's own `__contains__`, without a generator frame per rule (8.6 -> 6.4 us)."""
    if not text.isascii():
        return list(_RULES)
    contains = text.lower().__contains__
    return [rule for rule, needles in _GUARDED if needles is None or any(map(contains, needles))]


def _redact_once(text: str) -> str:
    for pattern, replacement in _applicable(text):
        text = pattern.sub(replacement, text)
    return text


def redact(text: str) -> str:
    """`text` with every recognised secret, address and private path replaced."""
    for _ in range(_MAX_ROUNDS):
        cleaned = _redact_once(text)
        if cleaned == text:
            return cleaned
        text = cleaned
    return text


def contains_sensitive(text: str) -> bool:
    """Whether `redact` would still change `text`: the check a writer makes before storing."""
    return any(pattern.search(text) for pattern, _ in _applicable(text))


def _tail(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes of the end of `text`, behind `CUT_MARKER` when cut; the
    cut lands between characters, never inside one."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    keep = limit - len(CUT_MARKER.encode("utf-8"))
    tail = data[len(data) - keep:]
    # skip continuation bytes (0b10xxxxxx): they belong to a character that was cut
    start = 0
    while start < len(tail) and tail[start] & 0xC0 == 0x80:
        start += 1
    return CUT_MARKER + tail[start:].decode("utf-8")


def capture_text(user_message: str, assistant_message: str) -> str | None:
    """One exchange as it may be stored, or None when it cannot be stored safely.

    The tail is kept because the end of an exchange is where a correction or a settled
    request usually sits. A cut can put the start of a new match at the edge (a path whose
    prefix was cut off, say), so the capped text is redacted again before the post-check.
    """
    text = f"User: {redact(user_message)}\nAssistant: {redact(assistant_message)}"
    for _ in range(_MAX_ROUNDS):
        capped = _tail(text, MAX_CAPTURE_BYTES)
        if capped == text:
            break
        body = redact(capped.removeprefix(CUT_MARKER))
        text = CUT_MARKER + body
        if len(text.encode("utf-8")) <= MAX_CAPTURE_BYTES:
            break
    if len(text.encode("utf-8")) > MAX_CAPTURE_BYTES or contains_sensitive(text):
        return None
    return text
