"""The keys the deterministic readers may emit, each with its kind of value and canonical form.

One table, read by the producers (what they may emit), the extractor's validation (the shape an
open key from the LLM must have), the stability detector and the renderer (how a value reads
to a person). Every deterministic producer's output passes `check`; a test over their outputs
holds them to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from habitus.vocabulary import languages, places, timezones, tools

STYLE, IDENTITY, TOOLING, VETO, GOAL, CHANNEL = (
    "style", "identity", "tooling", "veto", "goal", "channel")


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A key of the vocabulary: its class, its kind of value and, for closed kinds, the values.

    `kind`: "enum" (one of `values`), "language" (a BCP 47 tag), "name" (a person's or an
    organisation's name, as written), "lower" (lower-case words: a team, a role), "city" (a
    GeoNames city name), "timezone" (an IANA zone), "tool" (a catalogue tool of the category
    named by the key), "email", "text" (a goal's sentence)."""

    facet_class: str
    key: str
    kind: str
    values: tuple[str, ...] = ()
    #: what the key means, for a person reading PROFILE.md or a prompt
    label: str = ""


_SPECS: tuple[KeySpec, ...] = (
    KeySpec(STYLE, "verbosity", "enum", ("terse", "detailed"), "answer length"),
    KeySpec(STYLE, "preamble", "enum", ("skip",), "introductions"),
    KeySpec(STYLE, "format", "enum", ("tables", "bullets", "prose"), "layout of answers"),
    KeySpec(STYLE, "code", "enum", ("code-first", "diff"), "how code is shown"),
    KeySpec(STYLE, "examples", "enum", ("include",), "examples"),
    KeySpec(STYLE, "language", "language", (), "answer language"),
    KeySpec(STYLE, "emoji", "enum", ("none", "ok"), "emoji"),
    KeySpec(STYLE, "tone", "enum", ("formal", "casual", "friendly", "direct"), "tone"),
    KeySpec(STYLE, "units", "enum", ("metric", "imperial"), "units of measure"),
    KeySpec(STYLE, "clock", "enum", ("24h", "12h"), "time format"),
    KeySpec(IDENTITY, "name", "name", (), "name"),
    KeySpec(IDENTITY, "preferred_name", "name", (), "preferred name"),
    KeySpec(IDENTITY, "employer", "name", (), "employer"),
    KeySpec(IDENTITY, "team", "lower", (), "team"),
    KeySpec(IDENTITY, "role", "lower", (), "role"),
    KeySpec(IDENTITY, "location", "city", (), "location"),
    KeySpec(IDENTITY, "timezone", "timezone", (), "time zone"),
    KeySpec(IDENTITY, "email", "email", (), "email address"),
    KeySpec(IDENTITY, "pronouns", "enum", ("he/him", "she/her", "they/them", "he/they",
                                           "she/they", "xe/xem", "ze/zir", "any"), "pronouns"),
    *(KeySpec(TOOLING, category, "tool", tuple(names), category.replace("_", " "))
      for category, names in tools.CATEGORIES.items()),
    KeySpec(CHANNEL, "primary", "enum", ("email", "slack", "telegram", "sms", "whatsapp",
                                          "signal", "discord", "teams", "phone"),
            "how to reach the user"),
)
KEYS: dict[tuple[str, str], KeySpec] = {(s.facet_class, s.key): s for s in _SPECS}

#: a veto's key is `<kind>=<thing>` and its value `banned`; these are the kinds and things
BANNED = "banned"
VETO_THINGS: dict[str, frozenset[str]] = {
    "format": frozenset({"nested-bullets", "headings", "markdown", "numbered-lists",
                         "tables", "code-blocks"}),
    "content": frozenset({"disclaimers", "apologies", "caveats", "jargon", "filler",
                          "follow-up-questions"}),
    "style": frozenset({"long-replies"}),
}

_NAME_RE = re.compile(r"^[^\W\d_][\w'.&-]*(?: [\w'.&-]+){0,4}$")
_LOWER_RE = re.compile(r"^[a-z][a-z0-9+#&/.-]*(?: [a-z0-9+#&/.-]+){0,3}$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$")
#: an open key (from the LLM, or a goal's topic): a few lower-case words, no digits or dates
OPEN_KEY_RE = re.compile(r"^[a-z]+(?:[_-][a-z]+){0,3}$")
_DATE_WORDS = frozenset(
    """today yesterday tomorrow week weeks month months year years monday tuesday wednesday
    thursday friday saturday sunday january february march april may june july august
    september october november december jan feb mar apr jun jul aug sep sept oct nov dec now
    ago last next this from on always never""".split())
#: words that mark a key as a cut-off sentence, never a topic
_FRAGMENT_WORDS = frozenset(
    """the a an and or but to of in on at for with from by i we you my our your is are was
    be been please that which what when if so it this""".split())


def open_key_problem(key: str) -> str | None:
    """Why an open key (one not in `KEYS`) is not acceptable, or None when it is.

    Open keys come only from the LLM extractor and goal topics: short, lower-case words joined
    by `_` or `-`, no digits, no dates, no function words (a key like
    `from-now-on-always-use-markdown-tables-w` is a sentence cut to length, not a key)."""
    if not OPEN_KEY_RE.fullmatch(key):
        return "a key is one to four lower-case words joined by _ or -, without digits"
    words = re.split(r"[_-]", key)
    if any(w in _DATE_WORDS for w in words):
        return "a key holds no dates or times"
    if any(w in _FRAGMENT_WORDS for w in words):
        return "a key is a topic, not a piece of a sentence"
    if any(len(w) < 2 for w in words):
        return "a key holds no cut-off words"
    return None


def check(facet_class: str, key: str, value: str) -> str | None:
    """Why (class, key, value) is not in the vocabulary, or None when it is (canonical form
    included: "German" is no `style/language` value, "de" is)."""
    if facet_class == VETO:
        kind, sep, thing = key.partition("=")
        if not sep:
            return "a veto key is <kind>=<thing>"
        if value != BANNED:
            return "a veto's value is 'banned'"
        if kind == "tool":
            return None if tools.is_known_thing(thing) else f"{thing!r} is no catalogue tool"
        if kind in VETO_THINGS:
            return None if thing in VETO_THINGS[kind] else f"{thing!r} is no known {kind}"
        return f"{kind!r} is no veto kind"
    if facet_class == GOAL:
        problem = open_key_problem(key)
        if problem is not None:
            return problem
        return None if value.strip() and "\n" not in value else "a goal is one sentence"
    spec = KEYS.get((facet_class, key))
    if spec is None:
        return f"{facet_class}/{key} is not a key of the vocabulary"
    return _check_value(spec, value)


def _check_value(spec: KeySpec, value: str) -> str | None:
    ok: bool
    if spec.kind == "enum":
        ok = value in spec.values
    elif spec.kind == "language":
        ok = languages.is_language_tag(value)
    elif spec.kind == "name":
        ok = _NAME_RE.fullmatch(value) is not None and value[0].isupper()
    elif spec.kind == "lower":
        ok = _LOWER_RE.fullmatch(value) is not None
    elif spec.kind == "city":
        ok = places.is_city_name(value)
    elif spec.kind == "timezone":
        ok = timezones.is_timezone(value)
    elif spec.kind == "tool":
        ok = tools.is_tool(spec.key, value)
    elif spec.kind == "email":
        ok = _EMAIL_RE.fullmatch(value) is not None
    else:
        ok = bool(value.strip())
    return None if ok else f"{value!r} is not a canonical {spec.label or spec.key}"


def in_vocabulary(facet_class: str, key: str, value: str) -> bool:
    return check(facet_class, key, value) is None
