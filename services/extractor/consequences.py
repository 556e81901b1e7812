"""From a validated answer to what is stored and what is published (pure).

The stored form keeps what validation accepted with the chunk ids it cited, so the events of a
window can be rebuilt from it at any time (a redelivery, a replay) without asking the model or
re-running a validator that may have changed since; the event ids derive from the window and
the prompt version, so every rebuild publishes the same ids and readers drop the copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from habitus.events import CATALOG, Event
from habitus.events.domain import CandidateEmitted, CueFamily, FacetClass, SourceSummarised
from habitus.events.evidence import SourceSummaryRef
from habitus.ids import derived_event_id
from services.extractor.material import Chunk, window_chunks
from services.extractor.store import WindowRow
from services.extractor.validation import Validated
from services.extractor.windowing import Piece

PRODUCER = "extractor"


def chunks_of(pieces: Sequence[Piece]) -> list[Chunk]:
    """The window's chunks with the ids the model was shown (`c1` ...), in window order."""
    return window_chunks([p.draft for p in pieces])


def stored_result(validated: Validated) -> dict[str, Any]:
    return {
        "summary": validated.summary,
        "facets": [{"class": f.class_.value, "key": f.key, "value": f.value,
                    "confidence": f.confidence, "cue_family": f.cue_family.value,
                    "chunks": [c.ref for c in f.evidence]}
                   for f in validated.facets],
        "extras": {k: list(v) for k, v in validated.extras.items()},
        "rejections": [{"index": r.index, "reason": r.reason, "detail": r.detail}
                       for r in validated.rejections],
    }


def quarantine_rows(validated: Validated) -> list[tuple[int, str, str, Any]]:
    """(index, reason, detail, raw) per refusal; the whole output is index -1."""
    return [(-1 if r.index is None else r.index, r.reason, r.detail, r.raw)
            for r in validated.rejections]


def bad_json_result(content: str) -> tuple[dict[str, Any], list[tuple[int, str, str, Any]]]:
    detail = "the answer is not JSON (nor a fenced JSON block)"
    result: dict[str, Any] = {"summary": None, "facets": [], "extras": {},
              "rejections": [{"index": None, "reason": "bad_json", "detail": detail}]}
    return result, [(-1, "bad_json", detail, {"content": content[:20000]})]


def window_events(w: WindowRow, result: dict[str, Any], prompt_version: str, model: str
                  ) -> list[Event[Any]]:
    """One `CandidateEmitted` per accepted facet, then the window's `SourceSummarised` (last,
    so a reader that sees it has seen the window's candidates). None for an output refused
    whole: nothing of it is trusted, not even its summary."""
    if result.get("summary") is None:
        return []
    chunks = {c.ref: c for c in chunks_of(w.pieces)}
    last_event = w.pieces[-1].event_id if w.pieces else None
    summary_ref = SourceSummaryRef(summary_id=w.window_id)

    def event(payload: Any, *key: str) -> Event[Any]:
        return CATALOG.new(
            payload, tenant_id=w.tenant_id, user_id=w.user_id, producer=PRODUCER,
            occurred_at=w.closed_at,
            event_id=derived_event_id(PRODUCER, w.tenant_id, w.user_id, w.window_id,
                                      prompt_version, *key),
            causation_id=last_event, correlation_id=last_event)

    out: list[Event[Any]] = []
    for i, f in enumerate(result["facets"]):
        cited = [chunks[ref] for ref in f["chunks"] if ref in chunks]
        out.append(event(CandidateEmitted.model_validate({
            "class": FacetClass(f["class"]), "key": f["key"], "value": f["value"],
            "cue_family": CueFamily(f["cue_family"]),
            "evidence": [c.evidence for c in cited] + [summary_ref],
            "initial_confidence": f["confidence"],
            "observed_at": max(c.occurred_at for c in cited) if cited else w.closed_at,
            "producer": PRODUCER,
        }), "candidate", str(i)))
    extras = result.get("extras") or {}
    out.append(event(SourceSummarised(
        source=w.source, window_id=w.window_id, kind="reflect" if w.kind == "reflect"
        else "extract", summary=result["summary"], prompt_version=prompt_version,
        model=model, evidence=[p.draft.evidence for p in w.pieces],
        facets_emitted=len(result["facets"]), facets_rejected=len(result["rejections"]),
        observations=list(extras.get("observations", []))[:20],
        patterns=list(extras.get("patterns", []))[:20]), "summary"))
    return out
