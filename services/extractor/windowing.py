"""When a source's window closes: a pure fold over its material in stream order.

A window is the unit of one LLM call, so its bounds decide the cost: it closes when its
material reaches `window_tokens` (busy sources: each call covers many events), or once it has
been open `window_seconds` (quiet sources: material does not wait forever). Time here is the
stream's stored-at time of the events, never the wall clock, so a replay closes the same windows
at the same places and finds their answers already stored. A window that stops filling is
closed by the extractor's tick (`ExtractionWindowDue`), which sits in the same stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from pydantic import TypeAdapter

from habitus.events.evidence import EvidenceRef
from services.extractor.material import ChunkDraft, estimate_tokens, window_hash

ClosedBy = Literal["tokens", "time", "tick", "reflection"]
WindowKind = Literal["extract", "reflect"]
_EVIDENCE: TypeAdapter[Any] = TypeAdapter(EvidenceRef)


@dataclass(frozen=True)
class Limits:
    window_tokens: int
    window_seconds: float
    max_chunks: int


@dataclass(frozen=True)
class Piece:
    """One chunk of material as a window stores it: the draft and the event it came from."""

    draft: ChunkDraft
    event_id: str
    seq: int

    @cached_property
    def tokens(self) -> int:
        return estimate_tokens(self.draft.text)

    def as_dict(self) -> dict[str, Any]:
        return {**self.draft.as_dict(), "event_id": self.event_id, "seq": self.seq}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Piece:
        draft = ChunkDraft(doc["kind"], _EVIDENCE.validate_python(doc["evidence"]), doc["text"],
                           float(doc["occurred_at"]))
        return cls(draft, str(doc["event_id"]), int(doc["seq"]))


@dataclass(frozen=True)
class Kept:
    """The pieces a window already held when a batch read it back, as its row keeps them (each
    text sealed for its user), carried through the fold unopened: an open window of a busy
    source is read back and written again every batch it grows in, and a closing one's id is
    derived from its texts as stored. `tokens` is what its row says they count."""

    items: tuple[Mapping[str, Any], ...]
    tokens: int


@dataclass(frozen=True)
class OpenWindow:
    opened_seq: int
    opened_at: float
    #: the pieces added since it was read back (all of them, for a window made in the batch)
    pieces: tuple[Piece, ...] = ()
    kept: Kept | None = None

    @cached_property
    def tokens(self) -> int:
        return (self.kept.tokens if self.kept else 0) + sum(p.tokens for p in self.pieces)

    @property
    def size(self) -> int:
        """How many pieces it holds."""
        return (len(self.kept.items) if self.kept else 0) + len(self.pieces)


@dataclass(frozen=True)
class ClosedWindow:
    source: str
    kind: WindowKind
    opened_seq: int
    closed_seq: int
    closed_at: float
    closed_by: ClosedBy
    pieces: tuple[Piece, ...]
    #: what it held, unopened, before the batch that closed it (its pieces came after)
    kept: Kept | None = None

    @property
    def tokens(self) -> int:
        return (self.kept.tokens if self.kept else 0) + sum(p.tokens for p in self.pieces)

    def chunk_keys(self) -> list[str]:
        """Each chunk's key, in order: what it kept, then its pieces."""
        kept = [Piece.from_dict(item).draft.key for item in self.kept.items] if self.kept else []
        return [*kept, *(p.draft.key for p in self.pieces)]

    def window_id(self, texts: Sequence[str]) -> str:
        """The material's identity, from each chunk's text as its row keeps it (`texts`, in
        order): the same pieces of the same source give the same id, in every replay. Where
        texts are sealed for their user (deterministically), so is what the id is derived from:
        it is no plain fingerprint of what they said, and a closing window need not be opened.
        The prompt version is not part of it (a new prompt does not make old material new);
        stored answers are keyed by this id and the version."""
        return window_hash(self.source, self.kind, self.chunk_keys(), texts, "")


@dataclass
class Fold:
    """The outcome of adding material to a source: its open window after, and what closed."""

    open: OpenWindow | None
    closed: list[ClosedWindow] = field(default_factory=list)


def _close(source: str, window: OpenWindow, seq: int, at: float, by: ClosedBy
           ) -> ClosedWindow:
    return ClosedWindow(source, "extract", window.opened_seq, seq, at, by, window.pieces,
                        window.kept)


def add_material(source: str, window: OpenWindow | None, pieces: Sequence[Piece], *,
                 seq: int, stored_at: float, limits: Limits) -> Fold:
    """Add one event's pieces to the source's open window, closing windows as the limits say.

    Order matters and is fixed: a window open too long closes before the new material joins
    it; one the new material would overflow closes first too; a window the material filled
    closes at once. A single event larger than a window is a window of its own."""
    out = Fold(window)
    if not pieces:
        return out
    if out.open is not None and stored_at - out.open.opened_at >= limits.window_seconds:
        out.closed.append(_close(source, out.open, seq, stored_at, "time"))
        out.open = None
    adding = sum(p.tokens for p in pieces)
    if out.open is not None and (
            out.open.tokens + adding > limits.window_tokens
            or out.open.size + len(pieces) > limits.max_chunks):
        out.closed.append(_close(source, out.open, seq, stored_at, "tokens"))
        out.open = None
    if out.open is None:
        out.open = OpenWindow(seq, stored_at)
    out.open = replace(out.open, pieces=out.open.pieces + tuple(pieces))
    if out.open.tokens >= limits.window_tokens or out.open.size >= limits.max_chunks:
        out.closed.append(_close(source, out.open, seq, stored_at, "tokens"))
        out.open = None
    return out


def tick(source: str, window: OpenWindow | None, opened_seq: int, *, seq: int,
         stored_at: float) -> Fold:
    """The extractor's tick for the window opened at `opened_seq`: it closes that window if
    it is still open (a window that closed by size since, and any newer one, are left)."""
    if window is None or window.opened_seq != opened_seq:
        return Fold(window)
    return Fold(None, [_close(source, window, seq, stored_at, "tick")])


def reflection(source: str, pieces: Sequence[Piece], *, seq: int, stored_at: float
               ) -> ClosedWindow:
    """A one-turn window for a reflection, closed at once."""
    return ClosedWindow(source, "reflect", seq, seq, stored_at, "reflection", tuple(pieces))
