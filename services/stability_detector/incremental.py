"""Bringing a user's summaries forward to a rebuild's `as_of`: the evidence that is new, folded in.

The invariant a rebuild keeps: after a rebuild at `as_of`, the user's summaries are exactly
`summarize(every piece of evidence logged so far, as_of, window)`, and the evidence logged so
far but stamped after `as_of` is listed as deferred. The next rebuild (as_of never runs
backwards) therefore needs only the evidence logged since and the deferred pieces whose time has
come. Pure: the projection loads and saves, this decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from services.stability_detector.scoring import (
    Evidence,
    FacetKey,
    UserStats,
    counted,
    fold,
    summarize,
)
from services.stability_detector.settings import LearningSettings
from services.stability_detector.summary import OutOfOrderDenial

ValueKey = tuple[str, str, str]


@dataclass
class Advance:
    """What folding the new evidence did: the summaries changed, the evidence still waiting for
    its time, the keys to summarise again from the log, and how far the log was read."""

    changed: set[ValueKey] = field(default_factory=set)
    deferred: list[int] = field(default_factory=list)
    refold: set[FacetKey] = field(default_factory=set)
    folded_seq: int = 0


def advance(stats: UserStats, fresh: Iterable[Evidence], folded_seq: int, as_of: float,
            window: float | None, settings: LearningSettings) -> Advance:
    """Fold `fresh` (the evidence logged after `folded_seq` and the deferred pieces, in log
    order) into `stats` in place. A key whose denial came out of order is left for `refold`
    (the caller summarises it again from the log with `summarize_key`)."""
    out = Advance(folded_seq=folded_seq)
    for item in fresh:
        out.folded_seq = max(out.folded_seq, item.seq)
        if not counted(item, window, settings):
            continue  # a class not learned, or before the window: never counts
        if item.observed_at > as_of:
            out.deferred.append(item.seq)  # stamped ahead of the cache's clock: wait for it
            continue
        fk = (item.facet_class, item.key)
        if fk in out.refold:
            continue
        try:
            fold(stats, item, settings)
        except OutOfOrderDenial:
            out.refold.add(fk)
            continue
        out.changed.add((item.facet_class, item.key, item.value))
    return out


def summarize_key(stats: UserStats, fk: FacetKey, evidence: Sequence[Evidence], as_of: float,
                  window: float | None, settings: LearningSettings) -> tuple[set[ValueKey],
                                                                             set[ValueKey]]:
    """Replace one key's summaries with those of its evidence in the log (`evidence`: all of
    the key's, any order). Returns (values written, values gone)."""
    before = set(stats.get(fk, {}))
    fresh = summarize(evidence, as_of, window, settings).get(fk, {})
    if fresh:
        stats[fk] = fresh
    else:
        stats.pop(fk, None)
    return ({(*fk, v) for v in fresh}, {(*fk, v) for v in before - set(fresh)})


def deferred_of(evidence: Iterable[Evidence], as_of: float, window: float | None,
                settings: LearningSettings) -> list[int]:
    """The evidence that counts but is stamped after `as_of` (summarised from the log)."""
    return [e.seq for e in evidence if counted(e, window, settings) and e.observed_at > as_of]
