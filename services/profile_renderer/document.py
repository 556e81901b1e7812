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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

BLOCK_ORDER = ("style", "identity", "tooling", "vetoes", "goals", "connected-accounts")
HEADINGS = {
    "style": "Style",
    "identity": "Identity",
    "tooling": "Tooling",
    "vetoes": "Vetoes",
    "goals": "Goals",
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
PINNED_SUFFIX = " *(pinned)*"

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
_NEWLINES = "\r\n"


class FacetLike(Protocol):
    """What rendering needs of a facet; `habitus.prompt.ProfileFacet` satisfies it.

    Structural so this module does not import the prompt library at run time: the document
    logic is usable (and testable) on its own.
    """

    @property
    def facet_class(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def stability(self) -> float | None: ...


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


def _strength(facet: FacetLike) -> float:
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

    Order is the user's view of confidence: pinned first, then most stable, then by key (and
    value, so equal inputs always give equal bytes and a re-render is a no-op). As in the prompt,
    a (class, key) shows once (its strongest value) and a blank value not at all: a bullet with
    nothing after the colon says nothing.
    """
    grouped: dict[str, list[FacetLike]] = {name: [] for name in FACET_BLOCKS}
    for facet in facets:
        block = CLASS_BLOCK.get(facet.facet_class)
        if block is not None and _one_line(facet.value):
            grouped[block].append(facet)
    bodies: dict[str, str] = {}
    for name, members in grouped.items():
        members.sort(key=lambda f: (not f.pinned, -_strength(f), f.key, f.value))
        lines = []
        seen: set[tuple[str, str]] = set()
        for facet in members:
            if (facet.facet_class, facet.key) in seen:
                continue
            seen.add((facet.facet_class, facet.key))
            value = _one_line(facet.value)
            text = value if name == "goals" else f"**{_one_line(facet.key)}**: {value}"
            lines.append(_item(text) + (PINNED_SUFFIX if facet.pinned else ""))
        bodies[name] = _section(name, lines)
    return bodies


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


def _same(a: str, b: str) -> bool:
    """Block contents compared without trailing spaces or edge blank lines: those are no edit."""
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\r\n").split("\n")]
    return norm(a) == norm(b)


def apply_edit(current: str, edited: str) -> Edit:
    """Take the user's saved document: its outside text wins, `current`'s blocks always win.

    Blocks stay where the user moved them; a block the user deleted, broke or duplicated comes
    back from `current`, and a block that exists only in `edited` is dropped. All of those are
    reported as ignored, since they are edits of managed content.
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
            if not _same(item.content, mine[item.name].content):
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
