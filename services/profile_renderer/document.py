"""PROFILE.md as a pure document: managed blocks, the user's notes around them, repairs.

No I/O here: the service hands in the stored document and the fresh block bodies and gets back
the new text, which blocks changed and what it had to repair. Keeping it pure lets the tests
throw arbitrary (and arbitrarily broken) documents at it.

The one rule everything else serves: every byte outside a well-formed managed block belongs to
the user and survives every render. Only two kinds of bytes are ever dropped: a habitus marker
line that does not belong to a well-formed block (the line alone, never the text around it) and
the managed content of a block that appears a second time. Newlines that touch a block may be
normalised to one empty line; no other user byte changes.

A naive renderer pairs the first start marker with the first end marker it found. An orphan start
therefore makes it append a second block, and the next render pairs the orphan with that new
block's end and erases the user's text in between. Here a block is well formed only when its
start and end lines are adjacent in the sequence of marker lines, so a leftover start can never
swallow text: it is removed as a line and reported.

Marker lines inside fenced code are the user's text (someone documenting the format). Fences are
counted only when they close: an opener without a closer would otherwise hide every block
appended after it, and each render would append yet another block.

One managed block is also an input: "Not yet sure" lists the facets the evidence points to but
not yet surely, and the user settles them by editing it. `settle` reads a saved document against
the one it was edited from and says which lines were moved out (confirmed) and which deleted
(forgotten); the service publishes the commands. Anything else done to the block is an edit of
managed content like any other: ignored and reported.

Long on purpose: one pure document model (build the blocks, parse, assemble, edits,
settling "Not yet sure") whose parts share the marker and fence rules below; split, each part
would have to restate them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from habitus.prompt import SET_BY_USER_MARK
from services.profile_renderer.wording import shown_value

NOT_YET_SURE = "not-yet-sure"
BLOCK_ORDER = ("style", "identity", "tooling", "vetoes", "goals", NOT_YET_SURE,
               "connected-accounts")
HEADINGS = {
    "style": "Style",
    "identity": "Identity",
    "tooling": "Tooling",
    "vetoes": "Vetoes",
    "goals": "Goals",
    NOT_YET_SURE: "Not yet sure",
    "connected-accounts": "Connected Accounts",
}
# Channel facets say how to reach the user, not how to answer them: not rendered in PROFILE.md.
CLASS_BLOCK = {
    "style": "style",
    "identity": "identity",
    "tooling": "tooling",
    "veto": "vetoes",
    "goal": "goals",
}
FACET_BLOCKS = ("style", "identity", "tooling", "vetoes", "goals")
PLACEHOLDER = "*(no entries yet)*"
TITLE = "# User Profile\n"
NOT_YET_SURE_HINT = ("*Move a line into your profile above to confirm it, or delete it to "
                     "forget it.*")

_KNOWN = frozenset(BLOCK_ORDER)
_ORDER = {name: i for i, name in enumerate(BLOCK_ORDER)}
# The whole (stripped) line must be the marker; any name is recognised so that markers of blocks
# we do not manage still stop a known block from pairing across them (and are then left alone).
_MARKER = re.compile(r"<!-- habitus:([A-Za-z0-9_.-]+):(start|end) -->")
# A fence may sit in a list item or a block quote; recognising those too errs towards treating
# text as the user's, which is the safe side.
_CONTAINER = r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+|>[ \t]?)*[ \t]*"
_FENCE_OPEN = re.compile(_CONTAINER + r"(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(_CONTAINER + r"(`{3,}|~{3,})[ \t]*")
_LEADER = re.compile(_CONTAINER)
# What may follow a not-yet-sure line's "**class/key**: value" and still be that line: nothing,
# or the evidence after a dash (which a user moving the line may well trim or reword).
_EVIDENCE_TAIL = re.compile(r"\s+[\u2014\u2013-]")
_NEWLINES = "\r\n"


class FacetLike(Protocol):
    """What rendering needs of an active facet; `habitus.prompt.ProfileFacet` satisfies it."""

    @property
    def facet_class(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def set_by_user(self) -> bool: ...
    @property
    def stability(self) -> float | None: ...


class ProvisionalLike(Protocol):
    """What the not-yet-sure block needs of a facet; `habitus.prompt.ProvisionalFacet` fits."""

    @property
    def facet_class(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def stability(self) -> float: ...
    @property
    def evidence(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Account:
    """A connected provider account as shown in the `connected-accounts` block."""

    toolkit: str
    label: str


@dataclass(frozen=True)
class Rendered:
    """A render's result; write (and publish) only when `changed` or `repairs` is non-empty."""

    text: str
    changed: tuple[str, ...]
    repairs: tuple[str, ...]


@dataclass(frozen=True)
class Edit:
    """A saved document merged with the current blocks; `ignored` names blocks whose edits lost."""

    text: str
    ignored: tuple[str, ...]


@dataclass(frozen=True)
class SettledFacet:
    """A not-yet-sure facet the user settled, with the value it holds (not the value's text)."""

    facet_class: str
    key: str
    value: str


@dataclass(frozen=True)
class Settlement:
    """What a saved document does to the not-yet-sure facets.

    `promoted`: lines moved out of the block (into a facet block or the user's own text), to be
    confirmed. `removed`: lines deleted from the block that appear nowhere else, to be
    forgotten. `lines`: the stripped lines these explain (the block's and the moved copies), so
    that an edit made only of them is not reported as an ignored edit of managed content.
    """

    promoted: tuple[SettledFacet, ...] = ()
    removed: tuple[SettledFacet, ...] = ()
    lines: frozenset[str] = frozenset()


def start_marker(name: str) -> str:
    """The line that opens managed block `name`."""
    return f"<!-- habitus:{name}:start -->"


def end_marker(name: str) -> str:
    """The line that closes managed block `name`."""
    return f"<!-- habitus:{name}:end -->"


# ---------------------------------------------------------------------------------------------
# Bodies


def _one_line(text: str) -> str:
    """Collapse all whitespace so a value can never add a line (and with it a marker or fence)."""
    return " ".join(text.split())


def _item(text: str) -> str:
    """A list item line that cannot be read as a fence or a marker, whatever the value holds."""
    line = f"- {text}".rstrip()
    if _FENCE_OPEN.fullmatch(line):
        # "- ```x" opens a code block inside a list item; escaping the first backtick or tilde
        # keeps the characters visible without swallowing the rest of the document.
        line = "- \\" + text
    return line


def _strength(facet: FacetLike | ProvisionalLike) -> float:
    """Stability for ordering: None means pinned/infinite; NaN sorts last rather than randomly."""
    if facet.stability is None:
        return math.inf
    if math.isnan(facet.stability):
        return -math.inf
    return facet.stability


def _section(name: str, lines: Sequence[str]) -> str:
    """A block body: heading, empty line, the rows or the placeholder, final newline."""
    rows = "\n".join(lines) if lines else PLACEHOLDER
    return f"## {HEADINGS[name]}\n\n{rows}\n"


def facet_bodies(facets: Sequence[FacetLike]) -> dict[str, str]:
    """Bodies of the five facet blocks, always all five so emptied blocks show the placeholder.

    Order is the user's view of confidence: what the user set first (marked as such, the one
    marker the profile uses), then most stable, then by key (and value, so equal inputs always
    give equal bytes and a re-render is a no-op). As in the prompt, a (class, key) shows once
    (its strongest value) and a blank value not at all: a bullet with nothing after the colon
    says nothing.
    """
    grouped: dict[str, list[FacetLike]] = {name: [] for name in FACET_BLOCKS}
    for facet in facets:
        block = CLASS_BLOCK.get(facet.facet_class)
        if block is not None and _one_line(facet.value):
            grouped[block].append(facet)
    bodies: dict[str, str] = {}
    for name, members in grouped.items():
        members.sort(key=lambda f: (not f.set_by_user, -_strength(f), f.key, f.value))
        lines = []
        seen: set[tuple[str, str]] = set()
        for facet in members:
            if (facet.facet_class, facet.key) in seen:
                continue
            seen.add((facet.facet_class, facet.key))
            value = _one_line(facet.value)
            text = value if name == "goals" else f"**{_one_line(facet.key)}**: {value}"
            lines.append(_item(text) + (SET_BY_USER_MARK if facet.set_by_user else ""))
        bodies[name] = _section(name, lines)
    return bodies


def _unsure_label(facet_class: str, key: str, value: str) -> str:
    """"**class/key**: value" as the block shows it: the value as a person reads it, one line."""
    shown = _one_line(shown_value(facet_class, key, value))
    return f"**{_one_line(facet_class)}/{_one_line(key)}**: {shown}"


def _unsure_line(facet: ProvisionalLike) -> str:
    """One not-yet-sure row: the label, then what the guess rests on after a dash."""
    evidence = ", ".join(e for e in (_one_line(x) for x in facet.evidence) if e)
    label = _unsure_label(facet.facet_class, facet.key, facet.value)
    return _item(f"{label} \u2014 {evidence}" if evidence else label)


def _unsure_rows(facets: Sequence[ProvisionalLike]) -> list[tuple[str, ProvisionalLike]]:
    """The block's rows with the facet each shows, in the order the block lists them.

    The classes PROFILE.md has a block for (a channel is not shown when active either), a
    blank value not at all, a (class, key) once with its strongest value; strongest first,
    then class, key and value so equal inputs give equal bytes.
    """
    wanted = [f for f in facets if f.facet_class in CLASS_BLOCK and _one_line(f.value)]
    wanted.sort(key=lambda f: (-_strength(f), f.facet_class, f.key, f.value))
    rows: list[tuple[str, ProvisionalLike]] = []
    seen: set[tuple[str, str]] = set()
    for facet in wanted:
        if (facet.facet_class, facet.key) not in seen:
            seen.add((facet.facet_class, facet.key))
            rows.append((_unsure_line(facet), facet))
    return rows


def not_yet_sure_body(facets: Sequence[ProvisionalLike]) -> str:
    """Body of `not-yet-sure`: the hint on how to settle a row, then one row per facet.

    An empty block shows the placeholder alone: the hint speaks of lines there are none of.
    """
    rows = [line for line, _ in _unsure_rows(facets)]
    if not rows:
        return _section(NOT_YET_SURE, [])
    return _section(NOT_YET_SURE, [NOT_YET_SURE_HINT, "", *rows])


def accounts_body(accounts: Sequence[Account]) -> str:
    """Body of `connected-accounts`, sorted (and de-duplicated) so syncs in any order agree."""
    rows = sorted({(_one_line(a.toolkit), _one_line(a.label)) for a in accounts})
    lines = [_item(f"{toolkit} ({label})" if label else toolkit) for toolkit, label in rows]
    return _section("connected-accounts", lines)


# ---------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class _Block:
    """A well-formed managed block: its exact bytes (marker to marker) and inner content."""

    name: str
    text: str
    content: str


_Item = str | _Block


@dataclass(frozen=True)
class _Parsed:
    """A document as user text and kept blocks, in order, plus what the parse had to repair."""

    items: tuple[_Item, ...]
    repairs: tuple[str, ...]
    damaged: frozenset[str]

    def blocks(self) -> dict[str, _Block]:
        return {item.name: item for item in self.items if isinstance(item, _Block)}


def _lines(document: str) -> list[str]:
    """Lines with their newline kept, so joining them gives back the exact document."""
    parts = document.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _fenced(lines: Sequence[str]) -> list[bool]:
    """Which lines are inside (or delimit) a closed fenced code block."""
    fenced = [False] * len(lines)
    i = 0
    while i < len(lines):
        opener = _FENCE_OPEN.fullmatch(lines[i].rstrip(_NEWLINES))
        if opener is not None:
            fence, info = opener.group(1), opener.group(2)
            if not (fence[0] == "`" and "`" in info):  # CommonMark: no backtick in the info
                for j in range(i + 1, len(lines)):
                    closer = _FENCE_CLOSE.fullmatch(lines[j].rstrip(_NEWLINES))
                    if closer is not None and closer.group(1)[0] == fence[0] \
                            and len(closer.group(1)) >= len(fence):
                        for k in range(i, j + 1):
                            fenced[k] = True
                        i = j
                        break
        i += 1
    return fenced


def _markers(lines: Sequence[str]) -> list[tuple[int, str, str]]:
    """(line index, name, "start"|"end") of every marker line outside fenced code."""
    fenced = _fenced(lines)
    found = []
    for i, line in enumerate(lines):
        if not fenced[i]:
            match = _MARKER.fullmatch(line.strip())
            if match is not None:
                found.append((i, match.group(1), match.group(2)))
    return found


def _parse(document: str) -> _Parsed:
    """Split a document into user text and well-formed known blocks, repairing the rest.

    A known block is well formed when its start line is immediately followed, among the marker
    lines, by its own end line. Every other known marker line is dropped on its own; markers with
    unknown names are user text but still break a pairing, so they are never swallowed.
    """
    lines = _lines(document)
    repairs: list[tuple[int, str]] = []
    damaged: set[str] = set()
    drop: set[int] = set()
    pairs: list[tuple[int, int, str]] = []
    pending: tuple[int, str] | None = None

    def orphan(index: int, name: str, why: str) -> None:
        drop.add(index)
        damaged.add(name)
        repairs.append((index, f"removed orphan start marker of '{name}' at line {index + 1}"
                               f" ({why})"))

    for index, name, kind in _markers(lines):
        if name not in _KNOWN:
            if pending is not None:
                orphan(pending[0], pending[1], f"marker at line {index + 1} before its end")
                pending = None
            continue
        if kind == "start":
            if pending is not None:
                orphan(pending[0], pending[1], f"another start at line {index + 1} before its end")
            pending = (index, name)
        elif pending is not None and pending[1] == name:
            pairs.append((pending[0], index, name))
            pending = None
        else:
            if pending is not None:
                orphan(pending[0], pending[1], f"end of '{name}' at line {index + 1} instead")
                pending = None
            drop.add(index)
            damaged.add(name)
            repairs.append((index, f"removed stray end marker of '{name}' at line {index + 1}"
                                   " (no start marker before it)"))
    if pending is not None:
        orphan(pending[0], pending[1], "no end marker follows")

    kept: dict[int, tuple[int, str]] = {}
    first: dict[str, int] = {}
    for start, end, name in pairs:
        if name in first:
            drop.update(range(start, end + 1))
            damaged.add(name)
            repairs.append((start, f"removed duplicate '{name}' block at lines {start + 1}-"
                                   f"{end + 1} (the one at line {first[name] + 1} is kept)"))
        else:
            first[name] = start
            kept[start] = (end, name)

    items: list[_Item] = []
    text: list[str] = []
    i = 0
    while i < len(lines):
        if i in kept:
            end, name = kept[i]
            items.append("".join(text))
            text = []
            # The end line's newline stays with the following user text: it separates, it is
            # not part of the block.
            last = lines[end].rstrip("\n")
            items.append(_Block(name, "".join(lines[i:end]) + last, "".join(lines[i + 1:end])))
            if last != lines[end]:
                text.append("\n")
            i = end + 1
            continue
        if i not in drop:
            text.append(lines[i])
        i += 1
    items.append("".join(text))
    ordered = tuple(message for _, message in sorted(repairs))
    return _Parsed(tuple(items), ordered, frozenset(damaged))


# ---------------------------------------------------------------------------------------------
# Assembly


def _block(name: str, body: str) -> _Block:
    """A block in the exact managed format: start line, body, empty line, end line."""
    inner = body.rstrip("\n") + "\n\n"
    return _Block(name, f"{start_marker(name)}\n{inner}{end_marker(name)}", inner)


def _insert(items: list[_Item], block: _Block) -> None:
    """Put a missing block after its nearest present predecessor in BLOCK_ORDER, else before its
    nearest successor, else at the end, so repaired documents keep the familiar order."""
    rank = _ORDER[block.name]
    present = [(i, _ORDER[it.name]) for i, it in enumerate(items) if isinstance(it, _Block)]
    before = [(r, i) for i, r in present if r < rank]
    after = [(r, i) for i, r in present if r > rank]
    if before:
        position = max(before)[1] + 1
    elif after:
        position = min(after)[1]
    else:
        position = len(items)
    items.insert(position, block)


def _assemble(items: Iterable[_Item]) -> str:
    """Join text and blocks with exactly one empty line around each block.

    Only newlines touching a block are trimmed; a document that ends on a block ends with one
    newline, while user text at the end keeps whatever ending it had.
    """
    merged: list[_Item] = []
    for item in items:
        if isinstance(item, str) and merged and isinstance(merged[-1], str):
            merged[-1] += item
        else:
            merged.append(item)
    pieces: list[_Item] = []
    for n, item in enumerate(merged):
        if isinstance(item, _Block):
            pieces.append(item)
            continue
        if n > 0:
            item = item.lstrip(_NEWLINES)
        if n + 1 < len(merged):
            item = item.rstrip(_NEWLINES)
        if item:
            pieces.append(item)
    out: list[str] = []
    for n, piece in enumerate(pieces):
        if n > 0 and (isinstance(piece, _Block) or isinstance(pieces[n - 1], _Block)):
            out.append("\n\n")
        out.append(piece.text if isinstance(piece, _Block) else piece)
    if pieces and isinstance(pieces[-1], _Block):
        out.append("\n")
    return "".join(out)


def _check_body(name: str, body: str) -> None:
    """Refuse bodies that would break the document's structure on the next parse."""
    if name not in _KNOWN:
        raise ValueError(f"unknown block {name!r}")
    for line in body.split("\n"):
        if _MARKER.fullmatch(line.strip()) or _FENCE_OPEN.fullmatch(line.rstrip("\r")):
            raise ValueError(f"body of {name!r} holds a marker or fence line: {line!r}")


def render(document: str | None, bodies: Mapping[str, str]) -> Rendered:
    """Rewrite the blocks named in `bodies`, leave every other byte of the user's where it is.

    Blocks not named are kept as they stand (a facet render never touches the accounts block and
    an account sync never touches the facet blocks). When nothing changes and nothing needed
    repair, the input comes back unchanged, so the caller can skip the write and the event.
    """
    for name, body in bodies.items():
        _check_body(name, body)
    wanted = [name for name in BLOCK_ORDER if name in bodies]
    if document is None or not document.strip():
        if not wanted:
            return Rendered(TITLE if document is None else document, (), ())
        blocks = [_block(name, bodies[name]) for name in wanted]
        return Rendered(_assemble([TITLE, *blocks]), tuple(wanted), ())

    parsed = _parse(document)
    items = list(parsed.items)
    changed: set[str] = set()
    for n, item in enumerate(items):
        if isinstance(item, _Block) and item.name in bodies:
            fresh = _block(item.name, bodies[item.name])
            if fresh.text != item.text:
                items[n] = fresh
                changed.add(item.name)
    present = parsed.blocks()
    for name in wanted:
        if name not in present:
            _insert(items, _block(name, bodies[name]))
            changed.add(name)
    if not changed and not parsed.repairs:
        return Rendered(document, (), ())
    order = tuple(name for name in BLOCK_ORDER if name in changed)
    return Rendered(_assemble(items), order, parsed.repairs)


def _outside(parsed: _Parsed) -> list[str]:
    """The user's text segments, with the newlines that only separated them from blocks gone."""
    items = parsed.items
    segments = []
    for n, item in enumerate(items):
        if isinstance(item, str):
            if n > 0:
                item = item.lstrip(_NEWLINES)
            if n + 1 < len(items):
                item = item.rstrip(_NEWLINES)
            if item.strip():
                segments.append(item)
    return segments


def notes(document: str) -> str:
    """The user's own text, as a model should see it: no managed blocks, no title.

    Segments are joined with one empty line, the way they are separated in the document, so two
    paragraphs split by a block do not run together into one.
    """
    text = "\n\n".join(_outside(_parse(document))).strip()
    first, _, rest = text.partition("\n")
    if first.strip() == TITLE.strip():
        text = rest.strip()
    return text


def _same(a: str, b: str, explained: Collection[str] = ()) -> bool:
    """Block contents compared without trailing spaces, blank lines or the lines a settlement
    explains: none of those is an edit that was ignored."""
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.split("\n")
                if line.strip() and line.strip() not in explained]
    return norm(a) == norm(b)


def apply_edit(current: str, edited: str, explained: Collection[str] = ()) -> Edit:
    """Take the user's saved document: its outside text wins, `current`'s blocks always win.

    Blocks stay where the user moved them; a block the user deleted, broke or duplicated comes
    back from `current`, and a block that exists only in `edited` is dropped. All of those are
    reported as ignored, since they are edits of managed content. `explained` are lines a
    `settle` of the same edit acted on (`Settlement.lines`): a block changed only by them is
    not reported, since the edit was taken, as a command rather than as text.
    """
    mine = _parse(current).blocks()
    theirs = _parse(edited)
    ignored: set[str] = set(theirs.damaged)
    items: list[_Item] = []
    placed: set[str] = set()
    for item in theirs.items:
        if isinstance(item, str):
            items.append(item)
        elif item.name in mine:
            if not _same(item.content, mine[item.name].content, explained):
                ignored.add(item.name)
            items.append(mine[item.name])
            placed.add(item.name)
        else:
            ignored.add(item.name)
    for name in BLOCK_ORDER:
        if name in mine and name not in placed:
            _insert(items, mine[name])
            ignored.add(name)
    order = tuple(name for name in BLOCK_ORDER if name in ignored)
    if items == list(theirs.items) and not theirs.repairs:
        return Edit(edited, order)
    return Edit(_assemble(items), order)


# ---------------------------------------------------------------------------------------------
# Settling not-yet-sure facets


def _bare(line: str) -> str:
    """A line as compared for settling: no list or quote leader, whitespace collapsed."""
    text = " ".join(line.split())
    leader = _LEADER.match(text)
    return text[leader.end():] if leader else text


def _shows(line: str, label: str) -> bool:
    """Whether `line` is the row with this label, its evidence kept, trimmed or reworded."""
    bare = _bare(line)
    if not bare.startswith(label):
        return False
    rest = bare[len(label):]
    return not rest or _EVIDENCE_TAIL.match(rest) is not None


def _names(line: str, facet: ProvisionalLike) -> bool:
    """Whether `line` speaks of this facet's class and key, whatever value it gives."""
    return _bare(line).startswith(f"**{_one_line(facet.facet_class)}/{_one_line(facet.key)}**:")


def _content_lines(items: Iterable[_Item], skip: str) -> list[str]:
    """Every line of the user's text and of the kept blocks other than `skip`."""
    lines: list[str] = []
    for item in items:
        if isinstance(item, _Block):
            if item.name != skip:
                lines.extend(item.content.split("\n"))
        else:
            lines.extend(item.split("\n"))
    return lines


def settle(base: str, edited: str, provisional: Sequence[ProvisionalLike]) -> Settlement:
    """Which not-yet-sure rows of `base` the user confirmed or forgot in `edited`.

    `base` is the document the user edited (what they saw), `provisional` the facets the
    service now holds as not yet sure: a row is settled only if it is in `base`'s block and its
    facet still is. For each such row:

    - still in `edited`'s block: nothing (a copy made elsewhere too is a copy, not a move);
    - gone from the block and now in more places outside it than in `base` (moved into a
      facet block or into the user's own text; its evidence may be trimmed): promoted;
    - gone, and the class/key shows up with another value anywhere: the user rewrote it, which
      is neither a yes nor a no, so nothing (and the edit is reported as ignored);
    - gone and nowhere in `edited`: removed.

    A block that is missing, broken or duplicated in `edited` settles nothing: a lost marker
    must not confirm every row (they all turn into user text) nor forget them.
    """
    mine, theirs = _parse(base), _parse(edited)
    was = mine.blocks().get(NOT_YET_SURE)
    now = theirs.blocks().get(NOT_YET_SURE)
    if was is None or now is None or NOT_YET_SURE in theirs.damaged:
        return Settlement()
    rows = dict(_unsure_rows(provisional))
    inside = now.content.split("\n")
    outside = _content_lines(theirs.items, NOT_YET_SURE)
    before = _content_lines(mine.items, NOT_YET_SURE)
    promoted: list[SettledFacet] = []
    removed: list[SettledFacet] = []
    explained: set[str] = set()
    for row in dict.fromkeys(line.strip() for line in was.content.split("\n")):
        facet = rows.get(row)
        if facet is None:
            continue
        label = _unsure_label(facet.facet_class, facet.key, facet.value)
        if any(_shows(line, label) for line in inside):
            continue
        settled = SettledFacet(facet.facet_class, facet.key, facet.value)
        copies = [line.strip() for line in outside if _shows(line, label)]
        if len(copies) > sum(1 for line in before if _shows(line, label)):
            promoted.append(settled)
            explained.update((row, *copies))
        elif any(_names(line, facet) for line in (*inside, *outside)):
            continue
        elif not copies:
            removed.append(settled)
            explained.add(row)
    return Settlement(tuple(promoted), tuple(removed), frozenset(explained))
