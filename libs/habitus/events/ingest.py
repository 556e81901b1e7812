"""The ingest contract (v1): what agents send through `POST /v1/events`.

These models are the edge: they reject unknown fields and name the field at fault, because an
agent that sends `user_msg` instead of `user_message` must learn it now, not find an empty profile
later.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from habitus.events.envelope import Payload
from habitus.ids import derived_event_id

Text = str


class TimestampMark:
    """Marks a field as a point in time (epoch seconds), so the gateway can refuse one far in
    the future for every field of every type without a list to keep in sync."""


TIMESTAMP = TimestampMark()
Timestamp = Annotated[float, TIMESTAMP]


class ToolCall(Payload):
    tool_name: str = Field(min_length=1, max_length=128)
    ok: bool
    output_summary: str | None = Field(default=None, max_length=4000)
    duration_seconds: float | None = Field(default=None, ge=0)


class TurnRecorded(Payload):
    session_id: str = Field(min_length=1, max_length=128)
    turn_id: str = Field(min_length=1, max_length=128)
    channel: str = Field(min_length=1, max_length=64)
    user_message: Text
    assistant_message: Text
    user_at: Timestamp = Field(ge=0)
    assistant_at: Timestamp = Field(ge=0)
    previous_assistant_at: Timestamp | None = Field(default=None, ge=0)
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=256)


class EmailObserved(Payload):
    message_id: str = Field(min_length=1, max_length=512)
    direction: Literal["sent", "received"]
    from_: str = Field(alias="from", min_length=1, max_length=512)
    to: list[str] = Field(default_factory=list, max_length=512)
    subject: str = Field(default="", max_length=2000)
    body: Text
    sent_at: Timestamp = Field(ge=0)

    @field_validator("to", mode="before")
    @classmethod
    def _single_recipient(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class DocumentIngested(Payload):
    source_id: str = Field(min_length=1, max_length=512)
    chunk_id: str = Field(min_length=1, max_length=512)
    text: Text


class ProviderFields(Payload):
    """Account fields a connected provider reports; unknown fields are kept, not rejected,
    because each toolkit reports its own extras."""

    model_config = Payload.model_config | {"extra": "allow"}

    email: str | None = None
    name: str | None = None
    timezone: str | None = None
    role: str | None = None
    employer: str | None = None


class ProviderProfileSynced(Payload):
    toolkit: str = Field(min_length=1, max_length=128)
    connection_id: str = Field(min_length=1, max_length=256)
    fields: ProviderFields
    # When the provider was read: with it, each sync is its own event (see NATURAL_KEYS).
    synced_at: Timestamp | None = Field(default=None, ge=0)


class TraceStep(Payload):
    step_type: str = Field(min_length=1, max_length=64)
    timestamp: Timestamp = Field(ge=0)
    duration_seconds: float = Field(ge=0)
    input: Any = None
    output: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class TraceCompleted(Payload):
    trace_id: str = Field(min_length=1, max_length=128)
    query: Text
    agent: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=256)
    engine: str = Field(min_length=1, max_length=128)
    steps: list[TraceStep] = Field(default_factory=list, max_length=1024)
    result: Text
    outcome: Literal["success", "failure", "partial", "unknown"] | None = None
    feedback: float | None = Field(default=None, ge=0, le=1)
    started_at: Timestamp = Field(ge=0)
    ended_at: Timestamp = Field(ge=0)
    total_tokens: int = Field(ge=0)
    total_latency_seconds: float = Field(ge=0)
    cost_usd: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> TraceCompleted:
        if self.ended_at < self.started_at:
            raise ValueError("ended_at must not be before started_at")
        return self


class FeedbackGiven(Payload):
    trace_id: str | None = Field(default=None, min_length=1, max_length=128)
    turn_id: str | None = Field(default=None, min_length=1, max_length=128)
    score: float = Field(ge=0, le=1)
    outcome: Literal["success", "failure", "partial", "unknown"] | None = None

    @model_validator(mode="after")
    def _target(self) -> FeedbackGiven:
        if self.trace_id is None and self.turn_id is None:
            raise ValueError("one of trace_id or turn_id is required")
        return self


#: Each ingest type's natural key: the payload fields naming one occurrence, so an item sent
#: without an event_id gets the same id when the client retries it (and is stored once).
#: FeedbackGiven has none: two scores for one trace are two events.
#: ProviderProfileSynced without `synced_at` is keyed by a hash of its fields, so re-sending
#: values already reported is dropped as a duplicate, including a later sync that returns to
#: earlier values (A, B, then A again stays B): agents that can should send `synced_at`.
NATURAL_KEYS: dict[type[Payload], tuple[str, ...]] = {
    TurnRecorded: ("session_id", "turn_id"),
    EmailObserved: ("message_id",),
    DocumentIngested: ("source_id", "chunk_id"),
    ProviderProfileSynced: ("connection_id", "synced_at"),
    TraceCompleted: ("trace_id",),
}


def natural_event_id(payload: Payload, tenant_id: str, user_id: str) -> str | None:
    """The event id derived from the payload's natural key (None: the type has none)."""
    fields = NATURAL_KEYS.get(type(payload))
    if fields is None:
        return None
    parts = [type(payload).__name__, tenant_id, user_id]
    for name in fields:
        value = getattr(payload, name)
        if value is None:  # ProviderProfileSynced without synced_at
            doc = payload.model_dump(mode="json", by_alias=True)
            value = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        parts.append(repr(value) if isinstance(value, float) else str(value))
    return derived_event_id("ingest", *parts)
