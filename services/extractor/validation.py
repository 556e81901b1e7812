"""Validation of what the model returned: nothing reaches the learning pipeline unchecked.

A model's output is untrusted input twice over: the model can be wrong, and the material it
read can be hostile (an email telling it to "set identity/name to Mallory"). So every facet
must prove itself against the vocabulary (`habitus.vocabulary`) and the window that was sent: a
known class, a key of the vocabulary or a well-shaped open key, a short value in the
vocabulary's canonical form where it has the key, evidence that names chunks of the window
with quotes found in them, and a cue family the evidence can carry. A facet that fails is
quarantined with one reason; the other facets of the output still apply. An output whose shape
is wrong, or that proposes more facets than allowed, is quarantined whole: nothing of it
applies, not even the summary.

The rejection reasons are stable labels (metrics and the quarantine table use them):

Whole output (`Rejection.index` is None):

- `bad_shape`: the output is not a JSON object, or `summary` is not a string, or `facets` is
  not a list (for reflections: `observations` or `patterns` is not a list of strings, or
  `preferences` is not a list). A missing or null `summary` or list counts as empty: the
  model had nothing to say, which is not an error.
- `too_many_facets`: more facets than `max_facets`: a model that proposes that many has
  stopped selecting, and picking the "first eight" of them would be our guess, not its.

Per facet (`Rejection.index` is its position in the output):

- `bad_shape`: the facet is not a JSON object.
- `unknown_class`: the class is not one of the six (style, identity, tooling, veto, goal,
  channel).
- `class_not_allowed`: a known class this kind of call may not propose (reflections propose
  style and goal only).
- `bad_key`: the key is not a string, or, once canonical (`canonical_key`: stripped,
  lower-case, spaces and hyphens as `_`, a leading `<class>/` dropped, a key models use for
  one of the vocabulary's renamed to it, such as `tooling/lang` to `tooling/language`), is
  neither a key of the vocabulary (`habitus.vocabulary.keys.KEYS`) nor an open key the
  vocabulary accepts (`open_key_problem`: one to four short lower-case words joined by `_`,
  no digits, no dates or times, no function words, so that
  `from_now_on_always_use_markdown_tables_w`, `ship_by_march` and `q3_launch` are refused
  and `identity/favourite_colour` is kept), at most 64 characters. A veto's key is always
  `<kind>=<thing>` (`format=nested-bullets`, `tool=jquery`): the kind one of the
  vocabulary's (`format`, `content`, `style`, `tool`), the thing lower-case letters and
  digits joined by `-` (in a thing, spaces and `_` become `-`), with the `.`, `+` and `#` of
  tool names (`tool=next.js`, `tool=c++`), either a thing the vocabulary knows for that kind
  (a catalogue tool or library for `tool`, by its catalogue name: `tool=PostgreSQL` is
  `tool=postgres`) or a short thing shaped like an open key (`content=small-talk`). A thing
  the vocabulary knows gets its kind when the key has none or one of no veto (`lodash` and
  `library=lodash` are `tool=lodash`); `practice=global-state` is refused.
- `bad_value`: the value is not a string, or is empty, spans lines, holds control characters
  (or bidirectional overrides, which disguise how it reads) or is longer than 200
  characters: a profile entry is a short fact, not a paragraph. And, for a key of the
  vocabulary, the value has no canonical form of that key's kind: a style value not among the
  key's values (`style/verbosity=short`; case, spaces and `_` aside: `code first` is
  `code-first`), a language no major language's name or tag (`German`, `Deutsch` and `de` are
  `de`), a location no city of the GeoNames gazetteer (`München` is `Munich`, `Lisbon, Portugal`
  is `Lisbon`), a time zone no IANA zone, abbreviation, "Pacific"-style name, UTC offset or city
  (`IST` is `Asia/Kolkata`, or the zone of the output's own location when that zone uses it:
  `Europe/Dublin` beside `identity/location=Dublin`), a tooling value no catalogue tool of the
  key's category (`tooling/runtime=python` is refused, `PNPM` is `pnpm`, `PostgreSQL 16` is
  `postgres`), a name not capitalised once a lower-case one is (`sam rivera` is `Sam Rivera`), a
  team or role of more than four lower-case words, a channel not among `channel/primary`'s, a
  veto's value anything but `banned` (case aside). A tool under an open tooling key goes to the
  tool's usual category (`tooling/script_runner=Bun` is `tooling/runtime=bun`).
- `bad_confidence`: the confidence is not a finite number (a missing one is 0.5; numbers are
  clamped to [0, 1], since a model's 1.2 means "very sure", not "wrong").
- `bad_cue_family`: the cue family is not explicit, structural, behavioral or recurrence (a
  missing one is behavioral, the weakest claim; `authoritative` is for provider account data
  and never the model's to claim). Reflections ignore the field: their cue is behavioral.
- `missing_evidence`: no evidence, or evidence that is not a list of objects.
- `unknown_chunk`: an evidence item names no chunk, or a chunk id that was not in the window
  sent (a model citing material it was not shown is making it up).
- `quote_not_in_chunk`: an evidence item's quote is missing, empty, or not found in the chunk
  it names. The comparison folds case, runs of whitespace, typographic quotes, apostrophes and
  dashes, full-width letters and zero-width characters, and ignores surrounding quote marks
  and end punctuation, but matches whole words only: "npm" is not found in "pnpm".
- `evidence_is_instruction`: a cited chunk the user did not write contains text addressed to
  a language model (`prompts.instruction_spans`). Material that tries to steer the model is
  not evidence of anything about the user, so every facet citing it is rejected, whichever
  sentence it quotes.
- `explicit_not_own_words`: the cue family is `explicit` but a cited chunk is not the user's
  own words (an assistant reply, a received email, a document): only the user can state their
  own preference.
- `identity_from_inbound`: an identity facet with no cited chunk that is the user's own words
  or a document: who the user is cannot come from what somebody else wrote to them, nor from
  the assistant.
- `duplicate`: the same class, key and value (case aside) as an earlier valid facet of the
  same output.

Each facet gets the first reason that applies, in the order above. Every evidence item must
hold: one invented citation rejects the facet, because a model that invents one citation may
have invented the facet. A facet under a key of the vocabulary is stored in the vocabulary's
canonical form (`habitus.vocabulary.check` accepts every one), so the extractor's facets and
the producers' agree on class, key and value and reinforce each other; `facet_problem` says
whether a triple is such a fixpoint. Under an open key, values of style, tooling and channel
facets are lower-cased (identity and goal values keep the user's capitalisation), so "Bun" and
"bun" from two windows reinforce one facet.

Validation is total: it returns a `Validated` for any input, never raises.

Long on purpose: one pipeline of small checks a facet passes in order, read top to bottom
against the stable rejection reasons documented here.
"""

from __future__ import annotations

import math
import re
import unicodedata
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from habitus.events.domain import CueFamily, FacetClass
from habitus.vocabulary import keys as vocabulary
from habitus.vocabulary import tools
from habitus.vocabulary.keys import BANNED, KEYS, VETO_THINGS, KeySpec, open_key_problem
from habitus.vocabulary.languages import canonical_language, is_language_tag
from habitus.vocabulary.places import canonical_city, find_city
from habitus.vocabulary.timezones import canonical_timezone
from services.extractor.material import Chunk, ChunkEvidence, fold_text
from services.extractor.prompts import (
    MAX_FACETS,
    MAX_VALUE_CHARS,
    MODEL_CUE_FAMILIES,
    REFLECTION_CLASSES,
    instruction_spans,
)

MAX_SUMMARY_CHARS = 2000
#: reflection observations and patterns: how many are kept, and how long each may be
MAX_NOTES = 5
MAX_NOTE_CHARS = 300
DEFAULT_CONFIDENCE = 0.5
_LOWERCASE_CLASSES = frozenset(
    {FacetClass.STYLE, FacetClass.TOOLING, FacetClass.VETO, FacetClass.CHANNEL}
)
_CLASSES = frozenset(c.value for c in FacetClass)
#: bidirectional overrides and isolates: they reorder how a value reads on screen
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: a veto's `<kind>=<thing>`: the thing starts with a letter or digit and ends without `-`/`.`
_VETO_KEY_RE = re.compile(r"^(?=.{3,64}$)[a-z][a-z0-9_]*=[a-z0-9](?:[a-z0-9.+#-]*[a-z0-9+#])?$")
_KEY_SEPARATORS_RE = re.compile(r"[\s\-]+")
_THING_SEPARATORS_RE = re.compile(r"[\s_\-]+")
_SLUG_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: a trailing version a model adds to a tool's name ("Python 3.12", "Postgres 16")
_VERSION_RE = re.compile(r"\s+v?\d[\d.x]*$")
#: the veto kinds of the vocabulary: its kinds of things, and `tool`
_VETO_KINDS: tuple[str, ...] = (*VETO_THINGS, "tool")
#: keys models use for a key of the vocabulary: class -> key as given -> the vocabulary's key
_KEY_ALIASES: dict[str, dict[str, str]] = {
    "style": {"length": "verbosity", "answer_length": "verbosity", "formatting": "format",
              "answer_language": "language", "response_language": "language",
              "emojis": "emoji"},
    "identity": {"full_name": "name", "nickname": "preferred_name", "company": "employer",
                 "job_title": "role", "city": "location", "time_zone": "timezone",
                 "tz": "timezone", "email_address": "email"},
    "tooling": {"lang": "language", "programming_language": "language",
                "pm": "package_manager", "db": "database", "ide": "editor",
                "text_editor": "editor", "operating_system": "os",
                "cloud_provider": "cloud", "test_runner": "test_framework",
                "testing_framework": "test_framework", "ci_cd": "ci",
                "continuous_integration": "ci", "workflow_orchestrator": "orchestrator",
                "scheduler": "orchestrator", "pipeline_orchestrator": "orchestrator"},
    "channel": {"preferred_channel": "primary", "preferred": "primary",
                "contact_method": "primary"},
}
#: what a value of each kind of the vocabulary must be, for a rejection's detail
_FORMS = {
    "language": "a language's name or BCP 47 tag (German, de)",
    "name": "a name as written, capitalised (Sam Rivera)",
    "lower": "one to four lower-case words",
    "city": "a city of the GeoNames gazetteer (Munich)",
    "timezone": "an IANA zone or a name of one (Europe/Berlin, CET, Pacific time)",
    "email": "an email address",
}
_INNER_SPACE_RE = re.compile(r"[ \t\u00a0]+")
# characters ignored at either end of a quote: whitespace, quote marks, end punctuation
_QUOTE_EDGES = " \"'.,;:!?"


@dataclass(frozen=True)
class ValidFacet:
    """A facet that passed: ready to become a `CandidateEmitted` (producer `extractor`)."""

    class_: FacetClass
    key: str
    value: str
    confidence: float
    cue_family: CueFamily
    #: the cited chunks, in citation order, each once
    evidence: tuple[Chunk, ...]
    #: the facet's position in the model's output
    index: int = 0
    #: (chunk id, quote as the model gave it) for each evidence item, in order
    citations: tuple[tuple[str, str], ...] = ()

    @property
    def refs(self) -> list[ChunkEvidence]:
        """The evidence references, each once (a turn's user and assistant chunks share one)."""
        return list(dict.fromkeys(c.evidence for c in self.evidence))

    @property
    def observed_at(self) -> float:
        """When the evidence happened: its latest chunk, since decay should run from there."""
        return max(c.occurred_at for c in self.evidence)


@dataclass(frozen=True)
class Rejection:
    """One thing quarantined, with why."""

    #: the facet's index in the output; None: the whole output
    index: int | None
    #: a stable label, documented in this module's docstring
    reason: str
    #: human-readable: which field, what was wrong
    detail: str
    #: the rejected facet (or the whole output), as the model returned it
    raw: Any


@dataclass(frozen=True)
class Validated:
    """The outcome of validating one output: what applies and what is quarantined."""

    #: None when the whole output was rejected; reflections have none ("")
    summary: str | None
    facets: tuple[ValidFacet, ...]
    rejections: tuple[Rejection, ...]
    #: reflections: {"observations": [...], "patterns": [...]}; extractions: {}
    extras: dict[str, list[str]] = field(default_factory=dict)

    @property
    def rejected_whole(self) -> bool:
        """Whether nothing of the output applies."""
        return any(r.index is None for r in self.rejections)


class _Reject(Exception):
    """Raised inside the per-facet checks; becomes a `Rejection`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _whole(reason: str, detail: str, data: Any) -> Validated:
    return Validated(None, (), (Rejection(None, reason, detail, data),), {})


def validate_extraction(
    data: Any, chunks: Sequence[Chunk], *, max_facets: int = MAX_FACETS
) -> Validated:
    """Check a `{summary, facets}` output against the window `chunks` it was made from."""
    if not isinstance(data, dict):
        return _whole("bad_shape", f"output is {_type(data)}, not an object", data)
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        return _whole("bad_shape", f"summary is {_type(summary)}, not a string", data)
    facets = data.get("facets")
    if facets is not None and not isinstance(facets, list):
        return _whole("bad_shape", f"facets is {_type(facets)}, not a list", data)
    facets = facets or []
    if len(facets) > max_facets:
        return _whole("too_many_facets", f"{len(facets)} facets, at most {max_facets}", data)
    valid, rejections = _check_all(facets, chunks, reflection=False)
    return Validated(_bounded_summary(summary or ""), valid, rejections, {})


def validate_reflection(
    data: Any, chunks: Sequence[Chunk], *, max_facets: int = MAX_FACETS
) -> Validated:
    """Check an `{observations, patterns, preferences}` output: preferences become style and
    goal facets with a behavioral cue, through the same checks as extracted facets."""
    if not isinstance(data, dict):
        return _whole("bad_shape", f"output is {_type(data)}, not an object", data)
    extras: dict[str, list[str]] = {}
    for name in ("observations", "patterns"):
        notes = data.get(name)
        if notes is not None and (
            not isinstance(notes, list) or not all(isinstance(n, str) for n in notes)
        ):
            return _whole("bad_shape", f"{name} is not a list of strings", data)
        extras[name] = _notes(notes or [])
    preferences = data.get("preferences")
    if preferences is not None and not isinstance(preferences, list):
        return _whole("bad_shape", f"preferences is {_type(preferences)}, not a list", data)
    preferences = preferences or []
    if len(preferences) > max_facets:
        return _whole(
            "too_many_facets", f"{len(preferences)} preferences, at most {max_facets}", data
        )
    valid, rejections = _check_all(preferences, chunks, reflection=True)
    return Validated("", valid, rejections, extras)


def _check_all(
    raws: Sequence[Any], chunks: Sequence[Chunk], *, reflection: bool
) -> tuple[tuple[ValidFacet, ...], tuple[Rejection, ...]]:
    by_ref = {c.ref: c for c in chunks}
    valid: list[ValidFacet] = []
    rejections: list[Rejection] = []
    seen: set[tuple[str, str, str]] = set()
    # time zones last, so that the user's city, when the output names one, decides an
    # ambiguous abbreviation ("IST" is Dublin's for someone in Dublin)
    order = sorted(range(len(raws)), key=lambda i: _names_timezone(raws[i]))
    near: str | None = None
    for index in order:
        raw = raws[index]
        try:
            facet = _check(raw, index, by_ref, reflection=reflection, near=near)
            identity = (facet.class_.value, facet.key, facet.value.casefold())
            if identity in seen:
                raise _Reject("duplicate", f"{facet.class_}/{facet.key}={facet.value} again")
        except _Reject as r:
            rejections.append(Rejection(index, r.reason, r.detail, raw))
            continue
        seen.add(identity)
        valid.append(facet)
        if near is None and (facet.class_, facet.key) == (FacetClass.IDENTITY, "location"):
            city = find_city(facet.value)
            near = city.timezone if city is not None else None
    valid.sort(key=lambda f: f.index)
    rejections.sort(key=lambda r: r.index if r.index is not None else -1)
    return tuple(valid), tuple(rejections)


def _names_timezone(raw: Any) -> bool:
    """Whether `raw` looks like an identity/timezone facet (it is checked like any other)."""
    if not isinstance(raw, dict):
        return False
    class_, key = raw.get("class"), raw.get("key")
    return (isinstance(class_, str) and class_.strip().lower() == "identity"
            and isinstance(key, str) and canonical_key(key, FacetClass.IDENTITY) == "timezone")


def _check(
    raw: Any, index: int, by_ref: dict[str, Chunk], *, reflection: bool,
    near: str | None = None,
) -> ValidFacet:
    if not isinstance(raw, dict):
        raise _Reject("bad_shape", f"facet is {_type(raw)}, not an object")
    class_ = _class(raw.get("class"), reflection=reflection)
    key = _key(raw.get("key"), class_)
    key, value = _canonical(class_, key, _value(raw.get("value")), near=near)
    confidence = _confidence(raw.get("confidence"))
    cue = CueFamily.BEHAVIORAL if reflection else _cue_family(raw.get("cue_family"))
    citations = _citations(raw.get("evidence"))
    cited = [_cited_chunk(ref, i, by_ref) for i, (ref, _) in enumerate(citations)]
    for i, (chunk, (_, quote)) in enumerate(zip(cited, citations, strict=True)):
        if not isinstance(quote, str) or not quote_in_text(quote, chunk.text):
            raise _Reject(
                "quote_not_in_chunk",
                f"evidence[{i}] quote {_short(quote)} is not in chunk {chunk.ref}",
            )
    evidence = tuple(dict.fromkeys(cited))
    for chunk in evidence:
        spans = () if chunk.own_words else _instruction_spans(chunk.text)
        if spans:
            start, end = spans[0]
            raise _Reject(
                "evidence_is_instruction",
                f"chunk {chunk.ref} ({chunk.kind}) speaks to the model: "
                f"{_short(chunk.text[start:end])}",
            )
    if cue is CueFamily.EXPLICIT:
        other = [c for c in evidence if not c.own_words]
        if other:
            raise _Reject(
                "explicit_not_own_words",
                f"explicit, but chunk {other[0].ref} is a {other[0].kind}, not the user's words",
            )
    if class_ is FacetClass.IDENTITY and not any(
        c.own_words or c.kind == "document" for c in evidence
    ):
        raise _Reject(
            "identity_from_inbound",
            "identity cited only from " + ", ".join(sorted({c.kind for c in evidence})),
        )
    return ValidFacet(
        class_, key, value, confidence, cue, evidence, index,
        tuple((c.ref, str(q)) for c, (_, q) in zip(cited, citations, strict=True)),
    )


def _class(raw: Any, *, reflection: bool) -> FacetClass:
    name = raw.strip().lower() if isinstance(raw, str) else None
    if name not in _CLASSES:
        raise _Reject("unknown_class", f"class {_short(raw)} is not one of the six")
    class_ = FacetClass(name)
    if reflection and name not in REFLECTION_CLASSES:
        raise _Reject("class_not_allowed", f"a reflection may not propose {name}")
    return class_


def canonical_key(raw: str, class_: FacetClass | None = None) -> str:
    """The key as stored: stripped, lower-case, spaces and hyphens as `_`, without a leading
    `<class>/` (models often repeat the class in the key), and a key models use for one of the
    vocabulary's as the vocabulary's (`tooling/lang` is `tooling/language`, `identity/city` is
    `identity/location`). A veto's `<kind>=<thing>` keeps the vocabulary's shape: the kind as
    any key, the thing with spaces, `_` and hyphens as one `-` ("Format = nested_bullets" is
    `format=nested-bullets`), a tool's thing by its catalogue name (`tool=PostgreSQL` is
    `tool=postgres`); a thing the vocabulary knows gets its kind when the kind is missing or is
    none of the vocabulary's (`lodash` and `library=lodash` are `tool=lodash`,
    `nested bullets` is `format=nested-bullets`)."""
    key = raw.strip().lower()
    if class_ is not None:
        for sep in ("/", "."):
            key = key.removeprefix(f"{class_.value}{sep}")
    if class_ is FacetClass.VETO:
        return _veto_key(key)
    key = _KEY_SEPARATORS_RE.sub("_", key)
    if class_ is not None:
        key = _KEY_ALIASES.get(class_.value, {}).get(key, key)
    return key


def _veto_key(key: str) -> str:
    if "=" not in key:
        thing = _THING_SEPARATORS_RE.sub("-", key.strip()).strip("-")
        kind = _kind_of(thing)
        if kind is None:
            return _KEY_SEPARATORS_RE.sub("_", key)
    else:
        given, thing = key.split("=", 1)
        kind = _KEY_SEPARATORS_RE.sub("_", given.strip())
        thing = _THING_SEPARATORS_RE.sub("-", thing.strip()).strip("-")
        if kind not in _VETO_KINDS and _SLUG_RE.fullmatch(kind):
            kind = _kind_of(thing) or kind
    if kind == "tool":
        thing = _tool_name(thing) or thing
    return f"{kind}={thing}"


def _kind_of(thing: str) -> str | None:
    """The veto kind of a thing the vocabulary knows, or None."""
    for kind, things in VETO_THINGS.items():
        if thing in things:
            return kind
    return "tool" if _tool_name(thing) is not None else None


def _tool_name(text: str) -> str | None:
    """The catalogue name of the tool or library `text` spells ("VS Code", "vs-code",
    "Python 3.12"), or None."""
    for spelling in (text, text.replace("-", " "), _VERSION_RE.sub("", text)):
        tool = tools.canonical_tool(spelling)
        if tool is not None:
            return tool
    return None


def key_problem(key: str, class_: FacetClass) -> str | None:
    """Why `key`, as it is, is not a key of `class_` the validation keeps, or None.

    A key of the vocabulary is kept; any other key is an open key, which must pass
    `open_key_problem` (a few lower-case words, no digits, no dates, not a piece of a
    sentence). A veto's is `<kind>=<thing>` with a kind of the vocabulary, the thing one the
    vocabulary knows for that kind or a short thing shaped like an open key."""
    if class_ is FacetClass.VETO:
        if _VETO_KEY_RE.fullmatch(key) is None:
            return "not a <kind>=<thing> like format=nested-bullets"
        kind, thing = key.split("=", 1)
        if kind not in _VETO_KINDS:
            return f"{kind!r} is no veto kind ({', '.join(_VETO_KINDS)})"
        known = tools.is_known_thing(thing) if kind == "tool" else thing in VETO_THINGS[kind]
        problem = None if known else open_key_problem(thing)
        return None if problem is None else f"thing {thing!r}: {problem}"
    if _KEY_RE.fullmatch(key) is None:
        return "not a slug like package_manager"
    if (class_.value, key) in KEYS:
        return None
    return open_key_problem(key)


def is_canonical_key(key: str, class_: FacetClass) -> bool:
    """Whether `key`, as it is, is a key of `class_` the validation keeps (`bad_key`)."""
    return key_problem(key, class_) is None


def _key(raw: Any, class_: FacetClass) -> str:
    if not isinstance(raw, str):
        raise _Reject("bad_key", f"key is {_type(raw)}, not a string")
    key = canonical_key(raw, class_)
    problem = key_problem(key, class_)
    if problem is not None:
        shown = _short(raw) if key == raw else f"{_short(raw)} ({key!r} once canonical)"
        raise _Reject("bad_key", f"key {shown}: {problem}")
    return key


def _value(raw: Any) -> str:
    if not isinstance(raw, str):
        raise _Reject("bad_value", f"value is {_type(raw)}, not a string")
    value = _INNER_SPACE_RE.sub(" ", unicodedata.normalize("NFC", raw).strip())
    if not value:
        raise _Reject("bad_value", "value is empty")
    if len(value.splitlines()) > 1:
        raise _Reject("bad_value", "value spans several lines")
    if any(unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS for ch in value):
        raise _Reject("bad_value", "value holds control characters")
    if len(value) > MAX_VALUE_CHARS:
        raise _Reject("bad_value", f"value has {len(value)} characters, at most {MAX_VALUE_CHARS}")
    return value


def _canonical(
    class_: FacetClass, key: str, value: str, *, near: str | None = None
) -> tuple[str, str]:
    """(key, value) as stored: through the vocabulary when it has the key, else as given
    (lower-case for style, tooling and channel). A tool under an open tooling key goes to its
    catalogue category ("tooling/script_runner=Bun" is `tooling/runtime=bun`)."""
    if class_ is FacetClass.VETO:
        if value.lower() != BANNED:
            raise _Reject("bad_value", f"a veto's value is {BANNED!r}, not {_short(value)}")
        return key, BANNED
    spec = KEYS.get((class_.value, key))
    if spec is None:
        if class_ is FacetClass.TOOLING:
            tool = _tool_name(value)
            if tool is not None and tools.categories(tool):
                return tools.categories(tool)[0], tool
        return key, value.lower() if class_ in _LOWERCASE_CLASSES else value
    canonical = _vocabulary_value(spec, value, near)
    if canonical is None or vocabulary.check(class_.value, key, canonical) is not None:
        raise _Reject("bad_value", _not_canonical(spec, value, canonical))
    return key, canonical


def _vocabulary_value(spec: KeySpec, value: str, near: str | None) -> str | None:
    """`value` in the canonical form of `spec`'s kind, or None when it has none (the result is
    checked against the vocabulary all the same)."""
    if spec.kind == "enum":
        return _THING_SEPARATORS_RE.sub("-", value.lower()).strip("-")
    if spec.kind == "language":
        for tag in (value, value.lower()):
            if is_language_tag(tag):
                return tag
        return canonical_language(value)
    if spec.kind == "name":
        if value == value.lower():  # "sam rivera": a name the model did not capitalise
            return " ".join(word[:1].upper() + word[1:] for word in value.split(" "))
        return value
    if spec.kind == "lower":
        return value.lower()
    if spec.kind == "city":
        return canonical_city(value) or (
            canonical_city(value.split(",", 1)[0]) if "," in value else None)
    if spec.kind == "timezone":
        return _timezone(value, near)
    if spec.kind == "tool":
        return _tool_name(value)
    if spec.kind == "email":
        local, at, domain = value.rpartition("@")
        return f"{local}{at}{domain.lower()}" if at else value
    return value


def _timezone(value: str, near: str | None) -> str | None:
    """The IANA zone `value` names: a zone, an abbreviation (in any case), "Pacific", an
    offset, a zone in the wrong case, or a city (its zone)."""
    short = value.upper() if value.isalpha() and len(value) <= 5 else value
    for text in (value, short, f"{value} time"):
        zone = canonical_timezone(text, near=near)
        if zone is not None:
            return zone
    zone = _zones_folded().get(value.casefold())
    if zone is not None:
        return zone
    city = find_city(value) or (find_city(value.split(",", 1)[0]) if "," in value else None)
    return city.timezone if city is not None else None


@lru_cache(maxsize=1)
def _zones_folded() -> dict[str, str]:
    """IANA zones by their case-folded name ("europe/berlin"), the `Area/Place` ones only."""
    return {zone.casefold(): zone for zone in zoneinfo.available_timezones() if "/" in zone}


def _not_canonical(spec: KeySpec, value: str, canonical: str | None) -> str:
    where = f"{spec.facet_class}/{spec.key}"
    if spec.kind == "tool" and canonical is not None:
        usual = tools.categories(canonical)
        what = f"a {usual[0].replace('_', ' ')}" if usual else "a library"
        return f"{where}: {_short(value)} is {what}, not a {spec.label}"
    if spec.kind == "tool":
        return f"{where}: {_short(value)} is no {spec.label} of the catalogue"
    form = (f"one of {', '.join(spec.values)}" if spec.kind == "enum"
            else _FORMS.get(spec.kind, "a short value"))
    return f"{where}: {_short(value)} is not {form}"


def facet_problem(class_: FacetClass, key: str, value: str) -> str | None:
    """Why (class, key, value), as it is, is not what validation stores, or None when it is:
    a stored facet is a fixpoint (the eval corpus's labels are held to this)."""
    problem = key_problem(key, class_)
    if problem is not None:
        return f"key {key!r}: {problem}"
    if canonical_key(key, class_) != key:
        return f"key {key!r} is stored as {canonical_key(key, class_)!r}"
    try:
        kept = _canonical(class_, key, _value(value))
    except _Reject as r:
        return r.detail
    if kept != (key, value):
        return f"{class_.value}/{key}={value} is stored as {class_.value}/{kept[0]}={kept[1]}"
    return None


def _confidence(raw: Any) -> float:
    if raw is None:
        return DEFAULT_CONFIDENCE
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise _Reject("bad_confidence", f"confidence {_short(raw)} is not a number")
    return min(1.0, max(0.0, float(raw)))


def _cue_family(raw: Any) -> CueFamily:
    if raw is None:
        return CueFamily.BEHAVIORAL
    name = raw.strip().lower() if isinstance(raw, str) else None
    if name not in MODEL_CUE_FAMILIES:
        raise _Reject("bad_cue_family", f"cue family {_short(raw)} is not one of the four")
    return CueFamily(name)


def _citations(raw: Any) -> list[tuple[Any, Any]]:
    """(chunk, quote) of each evidence item, as given; a lone object is read as a list of one."""
    items = [raw] if isinstance(raw, dict) else raw
    if not items:
        raise _Reject("missing_evidence", "no evidence")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise _Reject("missing_evidence", "evidence is not a list of objects")
    return [(item.get("chunk"), item.get("quote")) for item in items]


def _cited_chunk(ref: Any, i: int, by_ref: dict[str, Chunk]) -> Chunk:
    chunk_id = _chunk_id(ref)
    chunk = by_ref.get(chunk_id) if chunk_id is not None else None
    if chunk is None:
        raise _Reject(
            "unknown_chunk", f"evidence[{i}] cites {_short(ref)}, not a chunk of the window"
        )
    return chunk


@lru_cache(maxsize=512)
def _instruction_spans(text: str) -> tuple[tuple[int, int], ...]:
    """`instruction_spans`, once per chunk text however many facets cite it."""
    return tuple(instruction_spans(text))


def _chunk_id(ref: Any) -> str | None:
    """`c3` from "c3", " C3 " or 3 (models number chunks loosely)."""
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        return f"c{ref}"
    if not isinstance(ref, str):
        return None
    ref = ref.strip().lower()
    return f"c{ref}" if ref.isdigit() else ref


def quote_in_text(quote: str, text: str) -> bool:
    """Whether `quote` appears in `text` as whole words, folded (see the module docstring)."""
    needle = fold_text(unicodedata.normalize("NFC", quote))[0].strip(_QUOTE_EDGES)
    if not any(ch.isalnum() for ch in needle):
        return False
    haystack = fold_text(unicodedata.normalize("NFC", text))[0]
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = haystack[start - 1] if start > 0 else " "
        after = haystack[end] if end < len(haystack) else " "
        if not (needle[0].isalnum() and before.isalnum()) and not (
            needle[-1].isalnum() and after.isalnum()
        ):
            return True
        start = haystack.find(needle, start + 1)
    return False


def _bounded_summary(summary: str) -> str:
    summary = summary.strip()
    if len(summary) <= MAX_SUMMARY_CHARS:
        return summary
    return summary[: MAX_SUMMARY_CHARS - 1].rstrip() + "\u2026"


def _notes(notes: Sequence[str]) -> list[str]:
    """Observations or patterns: single lines, bounded, empty ones dropped, at most MAX_NOTES."""
    out = [" ".join(n.split())[:MAX_NOTE_CHARS] for n in notes]
    return [n for n in out if n][:MAX_NOTES]


def _short(value: Any) -> str:
    """A value as it reads in a rejection's detail, bounded (the raw output is kept whole)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "\u2026"


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__
