"""Ingest items and the gateway's answer to a batch.

The builders (`turn`, `email`, `document`, `provider_profile`, `trace`, `feedback`) spell the
v1 ingest contract (`habitus.events.ingest`) as keyword arguments, so a misspelt field is a
`TypeError` in the agent, not a rejected item later. They fill what an agent rarely has at
hand: times default to now, and ids are generated once, when the item is built, so re-sending
the same `Item` (the client's retries do) is stored once. The gateway stays the judge of
validity (strict types, clock skew, sizes): nothing is validated here twice.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from habitus.events.ingest import NATURAL_KEYS
from habitus.ids import new_event_id

__all__ = (
    "FieldIssue",
    "IngestResult",
    "Item",
    "ItemResult",
    "document",
    "email",
    "feedback",
    "provider_profile",
    "tool_call",
    "trace",
    "trace_step",
    "turn",
)

TurnOutcome = Literal["completed", "error", "aborted", "truncated"]
RunOutcome = Literal["success", "failure", "partial", "unknown"]
ItemStatus = Literal["accepted", "duplicate", "rejected", "not_published", "conflict",
                     "not_stored", "not_confirmed"]

#: the ingest types whose event id the gateway derives from the payload (a retry is stored
#: once); an item of any other type (FeedbackGiven) gets its id from the client instead
_KEYED = frozenset(model.__name__ for model in NATURAL_KEYS)


@dataclass(frozen=True)
class Item:
    """One ingest item: what `POST /v1/events` takes, as `ingest` sends it."""

    type: str
    user_id: str
    payload: Mapping[str, Any]
    event_id: str | None = None
    occurred_at: float | None = None
    correlation_id: str | None = None
    causation_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"type": self.type, "user_id": self.user_id,
                               "payload": dict(self.payload)}
        for name in ("event_id", "occurred_at", "correlation_id", "causation_id"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = value
        return doc


def wire_item(item: Item | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON of an item, with an event id added to an item whose type derives none.

    Without it the gateway draws a fresh id per request, so a batch retried after an outage
    (which the client does by itself) would store such an item twice."""
    doc = item.to_json() if isinstance(item, Item) else dict(item)
    if "event_id" not in doc and isinstance(doc.get("type"), str) \
            and doc["type"] not in _KEYED:
        doc["event_id"] = new_event_id()
    return doc


def _now() -> float:
    return time.time()


def _clean(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The payload without the optional fields left unset (absent, not null, on the wire)."""
    return {k: v for k, v in doc.items() if v is not None}


def tool_call(name: str, ok: bool = True, *, output_summary: str | None = None,
              duration_seconds: float | None = None) -> dict[str, Any]:
    """One tool call of a turn: failures teach tool rules ("shell timed out twice")."""
    return _clean({"tool_name": name, "ok": ok, "output_summary": output_summary,
                   "duration_seconds": duration_seconds})


def turn(user: str, user_message: str, assistant_message: str, *,
         session_id: str = "default", turn_id: str | None = None, channel: str = "chat",
         at: float | None = None, answered_at: float | None = None,
         previous_answer_at: float | None = None,
         tool_calls: Sequence[Mapping[str, Any]] = (),
         outcome: TurnOutcome = "completed", event_id: str | None = None) -> Item:
    """A conversation turn (`TurnRecorded`): what the user wrote and what the assistant answered.

    `at` is when the user wrote (default now), `answered_at` when the answer was sent (default
    `at`). `previous_answer_at`, the time of the assistant's previous answer in the session,
    lets a quick follow-up ("shorter!") count as a correction, the strongest evidence; without
    it no message is read as one. `turn_id` defaults to a fresh id: pass your own to make a
    re-sent turn a duplicate across processes.
    """
    user_at = _now() if at is None else at
    return Item("TurnRecorded", user, _clean({
        "session_id": session_id,
        "turn_id": turn_id or uuid.uuid4().hex,
        "channel": channel,
        "user_message": user_message,
        "assistant_message": assistant_message,
        "user_at": user_at,
        "assistant_at": user_at if answered_at is None else answered_at,
        "previous_assistant_at": previous_answer_at,
        "tool_calls": [dict(c) for c in tool_calls],
        "outcome": outcome,
    }), event_id=event_id)


def email(user: str, *, sender: str, body: str, to: str | Sequence[str] = (),
          subject: str = "", direction: Literal["sent", "received"] = "sent",
          message_id: str | None = None, sent_at: float | None = None,
          toolkit: str | None = None, connection_id: str | None = None,
          event_id: str | None = None) -> Item:
    """An email the user sent or received (`EmailObserved`); signatures teach identity.

    `message_id` should be the Message-ID header (a re-sent message is then a duplicate); it
    defaults to a fresh one. `toolkit` and `connection_id` name the mailbox."""
    return Item("EmailObserved", user, _clean({
        "message_id": message_id or f"<{uuid.uuid4().hex}@habitus.client>",
        "direction": direction,
        "from": sender,
        "to": [to] if isinstance(to, str) else list(to),
        "subject": subject,
        "body": body,
        "sent_at": _now() if sent_at is None else sent_at,
        "toolkit": toolkit,
        "connection_id": connection_id,
    }), event_id=event_id)


def document(user: str, text: str, *, source_id: str, chunk_id: str | None = None,
             event_id: str | None = None) -> Item:
    """A chunk of a document the user wrote or owns (`DocumentIngested`).

    `chunk_id` defaults to a hash of the text, so the same chunk of the same source sent
    twice is stored once; pass positions ("p3") when one text may repeat in a source."""
    chunk = chunk_id or hashlib.sha256(text.encode()).hexdigest()[:32]
    return Item("DocumentIngested", user, {"source_id": source_id, "chunk_id": chunk,
                                           "text": text}, event_id=event_id)


def provider_profile(user: str, toolkit: str, connection_id: str,
                     fields: Mapping[str, Any] | None = None, *, email: str | None = None,
                     name: str | None = None, timezone: str | None = None,
                     role: str | None = None, employer: str | None = None,
                     synced_at: float | None = None, event_id: str | None = None) -> Item:
    """What a connected account reports about the user (`ProviderProfileSynced`).

    `fields` carries any extra the toolkit reports (kept, not refused); the keywords are the
    common ones. `synced_at` defaults to now, which makes each sync its own event (without it,
    re-reporting earlier values would be dropped as a duplicate)."""
    reported = {**(fields or {}), **_clean({"email": email, "name": name, "timezone": timezone,
                                            "role": role, "employer": employer})}
    return Item("ProviderProfileSynced", user, {
        "toolkit": toolkit, "connection_id": connection_id, "fields": reported,
        "synced_at": _now() if synced_at is None else synced_at}, event_id=event_id)


def trace_step(step_type: str, *, timestamp: float | None = None,
               duration_seconds: float = 0.0, input: Any = None, output: Any = None,
               metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One step of a run (llm, tool, retrieval, ...), for `trace(steps=...)`."""
    return _clean({"step_type": step_type,
                   "timestamp": _now() if timestamp is None else timestamp,
                   "duration_seconds": duration_seconds, "input": input, "output": output,
                   "metadata": dict(metadata) if metadata else None})


def trace(user: str, query: str, result: str, *, agent: str, model: str,
          engine: str = "custom", trace_id: str | None = None,
          steps: Sequence[Mapping[str, Any]] = (), outcome: RunOutcome | None = None,
          feedback: float | None = None, started_at: float | None = None,
          ended_at: float | None = None, total_tokens: int = 0,
          latency_seconds: float | None = None, cost_usd: float | None = None,
          event_id: str | None = None) -> Item:
    """A finished agent run (`TraceCompleted`): the router learns which model suits which query.

    Times: `ended_at` defaults to now; `latency_seconds` to `ended_at - started_at`, and
    `started_at` to `ended_at - latency_seconds` (so give either). `trace_id` defaults to a
    fresh id; pass yours to attach `feedback(trace_id=...)` later."""
    end = _now() if ended_at is None else ended_at
    if started_at is None:
        started_at = end - (latency_seconds or 0.0)
    latency = max(0.0, end - started_at) if latency_seconds is None else latency_seconds
    return Item("TraceCompleted", user, _clean({
        "trace_id": trace_id or uuid.uuid4().hex,
        "query": query,
        "agent": agent,
        "model": model,
        "engine": engine,
        "steps": [dict(s) for s in steps],
        "result": result,
        "outcome": outcome,
        "feedback": feedback,
        "started_at": started_at,
        "ended_at": end,
        "total_tokens": total_tokens,
        "total_latency_seconds": latency,
        "cost_usd": cost_usd,
    }), event_id=event_id)


def feedback(user: str, score: float, *, trace_id: str | None = None,
             turn_id: str | None = None, outcome: RunOutcome | None = None,
             event_id: str | None = None) -> Item:
    """A score from 0 (bad) to 1 (good) for a trace or a turn (`FeedbackGiven`).

    Two scores for one run are two events, so the id is drawn here, once: a retried batch
    still stores the score once."""
    if trace_id is None and turn_id is None:
        raise ValueError("feedback needs trace_id or turn_id")
    return Item("FeedbackGiven", user,
                _clean({"trace_id": trace_id, "turn_id": turn_id, "score": score,
                        "outcome": outcome}),
                event_id=event_id or new_event_id())


@dataclass(frozen=True)
class FieldIssue:
    """One reason an item was rejected: the field (`payload.user_at`) and why."""

    field: str
    reason: str


@dataclass(frozen=True)
class ItemResult:
    """What became of one item of a batch, by its position in it.

    `status`: accepted, duplicate (already stored: a retry), rejected (`errors` say why),
    not_published (valid, but its batch was refused for another item), conflict (its event id
    is stored with another payload), not_stored or not_confirmed (an outage: retry it)."""

    index: int
    status: str
    type: str | None = None
    event_id: str | None = None
    seq: int | None = None
    errors: tuple[FieldIssue, ...] = ()
    error: str | None = None

    @property
    def stored(self) -> bool:
        """In the event log: newly, or already (a duplicate)."""
        return self.status in ("accepted", "duplicate")


@dataclass(frozen=True)
class IngestResult:
    """The gateway's answer to a batch: counts, and each item's result in the batch's order."""

    accepted: int
    duplicates: int
    rejected: int
    conflicts: int = 0
    failed: int = 0
    results: tuple[ItemResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every item is stored (accepted or a duplicate)."""
        return all(r.stored for r in self.results)

    @property
    def rejected_items(self) -> tuple[ItemResult, ...]:
        return tuple(r for r in self.results if r.status == "rejected")

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> IngestResult:
        results = tuple(
            ItemResult(
                index=int(r["index"]), status=str(r["status"]), type=r.get("type"),
                event_id=r.get("event_id"), seq=r.get("seq"),
                errors=tuple(FieldIssue(str(e.get("field", "")), str(e.get("reason", "")))
                             for e in r.get("errors") or ()),
                error=r.get("error"))
            for r in body.get("results") or ())
        return cls(accepted=int(body.get("accepted", 0)),
                   duplicates=int(body.get("duplicates", 0)),
                   rejected=int(body.get("rejected", 0)),
                   conflicts=int(body.get("conflicts", 0)),
                   failed=int(body.get("failed", 0)), results=results)
