"""What the cache needs of one (class, key, value)'s evidence, kept as a running summary.

Every quantity the cache computes from a value's evidence is a fold that can be carried forward
one piece of evidence at a time: per cue family a count and the newest time (the stability is
weight · 2^(-age of the newest / half-life) · log(1 + count), so the decay needs only the newest
time and the reference `as_of`); the first and last time; the newest authoritative report; the
newest statement; up to two independent structural sources; the newest few evidence refs. So a
rebuild folds only the evidence that arrived since the last one into the stored summaries and
scores those: its cost follows how many distinct values the user has, never how much evidence.

The one fold that is not a plain merge is a denial ("no" to a confirmation, or the value taken
back in words), which removes the value's evidence logged before it, and any observed before
it that is logged later (a turn the extractor summarises after the denial). Folded in log order
it empties the summary and remembers its place and time; folded after later evidence of the
same value (possible only when evidence stamped in the future waited for its time),
`OutOfOrderDenial` asks the caller to summarise the key again
from the log. Pure: no clock, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

#: how a denial is spelled in `Evidence.stance` (habitus.events.domain.Stance)
DENIED = "denied"
AUTHORITATIVE = "authoritative"
#: the cues an independent source of an identity value comes by
SOURCE_CUES = frozenset({"structural", AUTHORITATIVE})
#: stances that are not statements about the user (said once, for this request only)
NOT_STATEMENTS = frozenset({"one_off"})


class OutOfOrderDenial(Exception):
    """A denial folded after evidence of its value logged later than it: the value's summary
    cannot tell which of what it holds came before the denial, so the key must be summarised
    again from the log (in log order)."""


@dataclass(slots=True)
class ValueStats:
    """The running summary of one value's evidence (all of it inside the evidence window and
    observed by the summary's `as_of`). Mutable: folding is the hot path."""

    #: per cue family: how many pieces of evidence, and the newest one's time
    counts: dict[str, int] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)
    first_at: float | None = None
    last_at: float | None = None
    #: the highest log position folded in (0: none)
    max_seq: int = 0
    #: the newest authoritative piece: (observed_at, seq)
    authoritative: tuple[float, int] | None = None
    #: the newest statement by log position: (seq, stance)
    said: tuple[int, str] | None = None
    #: up to two distinct events that are independent sources (structural, authoritative),
    #: the first two in id order
    sources: list[str] = field(default_factory=list)
    #: the newest distinct refs: (observed_at, seq, place in its item, ref), newest first;
    #: None: not loaded (stored apart, read only for the values a rebuild touches or shows)
    refs: list[tuple[float, int, int, Mapping[str, Any]]] | None = field(default_factory=list)
    #: evidence at or before this log position is gone (a denial's; 0: none)
    denied_through: int = 0
    #: and evidence observed at or before this time, wherever it lands in the log (None:
    #: none): what an extractor summarises later of turns before the denial stays denied
    denied_at: float | None = None
    #: each ref's dedup token, aligned with `refs` (worked out once per loaded summary)
    _tokens: list[Hashable] | None = field(default=None, compare=False, repr=False)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def cues(self) -> frozenset[str]:
        return frozenset(c for c, n in self.counts.items() if n)

    def add(self, *, event_id: str, cue: str, observed_at: float, seq: int,
            refs: Iterable[Mapping[str, Any]], stance: str | None, keep_refs: int) -> None:
        """Fold one piece of evidence in. Raises `OutOfOrderDenial` (leaving the summary as it
        was) for a denial older than evidence already folded."""
        if seq <= self.denied_through:
            if stance == DENIED and (self.denied_at is None or observed_at > self.denied_at):
                # a denial that waited for its time, after a later one in the log: its time
                # still counts, as it would have folded in log order
                if self.max_seq > seq:
                    raise OutOfOrderDenial(seq)
                self.denied_at = observed_at
            return  # denied before it was folded in
        if stance == DENIED:
            if self.max_seq > seq:
                raise OutOfOrderDenial(seq)
            self._clear(seq, observed_at)
            return
        if self.denied_at is not None and observed_at <= self.denied_at:
            return  # said before the denial, logged after it (a window summarised late)
        self.counts[cue] = self.counts.get(cue, 0) + 1
        newest = self.newest.get(cue)
        self.newest[cue] = observed_at if newest is None else max(newest, observed_at)
        self.first_at = observed_at if self.first_at is None else min(self.first_at,
                                                                       observed_at)
        self.last_at = observed_at if self.last_at is None else max(self.last_at, observed_at)
        self.max_seq = max(self.max_seq, seq)
        if cue == AUTHORITATIVE and (self.authoritative is None
                                     or (observed_at, seq) > self.authoritative):
            self.authoritative = (observed_at, seq)
        if stance is not None and stance not in NOT_STATEMENTS and (
                self.said is None or seq > self.said[0]):
            self.said = (seq, stance)
        if cue in SOURCE_CUES and event_id not in self.sources:
            # two are all that matter; the two first in id order, whatever the folding order
            self.sources = sorted([*self.sources, event_id])[:2]
        fresh = [(observed_at, seq, place, ref) for place, ref in enumerate(refs)]
        if fresh:
            self._add_refs(fresh, keep_refs)

    def _add_refs(self, fresh: list[tuple[float, int, int, Mapping[str, Any]]], keep: int
                  ) -> None:
        if self.refs is None:
            raise ValueError("a summary's refs must be loaded before evidence is folded in")
        tokens = self._tokens
        if tokens is None:
            tokens = [_token(e[3]) for e in self.refs]
        new = [_token(e[3]) for e in fresh]
        observed_at, seq = fresh[0][0], fresh[0][1]
        # the common case, evidence newer than all kept: the new refs go first, as they are
        if (not self.refs or (observed_at, seq) > self.refs[0][:2]) and \
                len(set(new)) == len(new) and not set(new) & set(tokens):
            self.refs = (fresh + self.refs)[:keep]
            self._tokens = (new + tokens)[:keep]
            return
        self.refs = newest_distinct(self.refs + fresh, keep)
        self._tokens = [_token(e[3]) for e in self.refs]

    def _clear(self, denied_through: int, denied_at: float) -> None:
        self.counts, self.newest = {}, {}
        self.first_at = self.last_at = self.authoritative = self.said = None
        self.max_seq, self.sources, self.refs, self._tokens = 0, [], [], []
        self.denied_through = denied_through
        self.denied_at = denied_at if self.denied_at is None else max(self.denied_at, denied_at)

    def ref_list(self) -> tuple[Mapping[str, Any], ...]:
        """The refs, newest first (empty when not loaded: the caller fills them in)."""
        return tuple(r for *_, r in self.refs or ())

    # ------------------------------------------------------------------ storage

    def to_json(self) -> dict[str, Any]:
        return {"c": self.counts, "n": self.newest, "f": self.first_at, "l": self.last_at,
                "m": self.max_seq, "a": self.authoritative, "s": self.said,
                "src": self.sources, "d": self.denied_through,
                **({"dt": self.denied_at} if self.denied_at is not None else {})}

    def refs_json(self) -> list[list[Any]]:
        if self.refs is None:
            raise ValueError("the summary's refs were not loaded")
        return [list(r) for r in self.refs]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], refs: Iterable[Sequence[Any]] | None = None
                  ) -> ValueStats:
        """A summary as stored (`refs`: its refs as stored, or None: not loaded)."""
        auth, said = doc.get("a"), doc.get("s")
        return cls(
            counts={k: int(v) for k, v in doc["c"].items()},
            newest={k: float(v) for k, v in doc["n"].items()},
            first_at=doc.get("f"), last_at=doc.get("l"), max_seq=int(doc.get("m", 0)),
            authoritative=None if auth is None else (float(auth[0]), int(auth[1])),
            said=None if said is None else (int(said[0]), str(said[1])),
            sources=list(doc.get("src", ())),
            refs=None if refs is None else parse_refs(refs),
            denied_through=int(doc.get("d", 0)),
            denied_at=None if doc.get("dt") is None else float(doc["dt"]),
        )


def parse_refs(refs: Iterable[Sequence[Any]]) -> list[tuple[float, int, int,
                                                           Mapping[str, Any]]]:
    return [(float(o), int(s), int(p), r) for o, s, p, r in refs]


def _token(ref: Mapping[str, Any]) -> Hashable:
    """What makes two refs the same ref: their items (refs are flat, so a sorted tuple of them
    is cheap and hashable); JSON text for one that is not."""
    try:
        token = tuple(sorted(ref.items()))
        hash(token)
        return token
    except TypeError:
        return json.dumps(ref, sort_keys=True)


def newest_distinct(entries: list[tuple[float, int, int, Mapping[str, Any]]], keep: int
                    ) -> list[tuple[float, int, int, Mapping[str, Any]]]:
    """The `keep` newest distinct refs, each at its newest occurrence. Exact under merging: a
    ref among the newest `keep` of a union is among the newest `keep` of the side it is newest
    in, so trimming each side first loses nothing."""
    entries = sorted(entries, key=lambda e: (-e[0], -e[1], e[2]))  # stable: earlier first
    seen: set[Hashable] = set()
    out = []
    for entry in entries:
        token = _token(entry[3])
        if token in seen:
            continue
        seen.add(token)
        out.append(entry)
        if len(out) >= keep:
            break
    return out


def dumps(stats: ValueStats) -> str:
    """A summary as the JSONB it is stored as (serialised in C: a rebuild writes every summary
    it changed, and the standard library's encoder was a twentieth of the learning cache)."""
    return to_json(stats.to_json()).decode()


def dumps_refs(stats: ValueStats) -> str:
    return to_json(stats.refs_json()).decode()
