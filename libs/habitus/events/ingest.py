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
    tool_name: str = Field(
        min_length=1, max_length=128,
        description="The tool's name, as the agent knows it; tool-scoped rules are keyed by it.")
    ok: bool = Field(description="Whether the call succeeded.")
    output_summary: str | None = Field(
        default=None, max_length=4000, description="A short summary of what the tool returned.")
    duration_seconds: float | None = Field(
        default=None, ge=0, description="How long the call took.")


class TurnRecorded(Payload):
    session_id: str = Field(
        min_length=1, max_length=128, description="The conversation the turn belongs to.")
    turn_id: str = Field(
        min_length=1, max_length=128,
        description="The turn, unique within its session; with session_id it identifies the turn "
                    "(a re-sent turn is a duplicate).")
    channel: str = Field(
        min_length=1, max_length=64,
        description="Where the conversation happens (chat, slack, email, voice, ...).")
    user_message: Text = Field(description="What the user wrote.")
    assistant_message: Text = Field(description="What the assistant answered.")
    user_at: Timestamp = Field(
        ge=0, description="When the user's message was sent (epoch seconds).")
    assistant_at: Timestamp = Field(
        ge=0, description="When the assistant's answer was sent (epoch seconds).")
    previous_assistant_at: Timestamp | None = Field(
        default=None, ge=0,
        description="When the assistant's previous answer in this session was sent (epoch "
                    "seconds). A user message that follows it within 30 seconds is read as a "
                    "correction of that answer ('shorter', 'no bullet points'), which is strong "
                    "evidence of a preference; absent, no message is read as one.")
    tool_calls: list[ToolCall] = Field(
        default_factory=list, max_length=256,
        description="The tools the assistant called in this turn, in order.")
    outcome: Literal["completed", "error", "aborted", "truncated"] = Field(
        default="completed",
        description="How the assistant's answer ended: a turn that ended in an error, was "
                    "aborted or cut off at the length limit teaches no habit.")


class EmailObserved(Payload):
    message_id: str = Field(
        min_length=1, max_length=512,
        description="The message's id (its Message-ID header); a re-sent one is a duplicate.")
    direction: Literal["sent", "received"] = Field(
        description="Whether the user sent or received it.")
    from_: str = Field(
        alias="from", min_length=1, max_length=512, description="The sender's address.")
    to: list[str] = Field(
        default_factory=list, max_length=512,
        description="The recipients' addresses (a single string is taken as one).")
    subject: str = Field(default="", max_length=2000, description="The subject line.")
    body: Text = Field(description="The body, as plain text.")
    sent_at: Timestamp = Field(ge=0, description="When it was sent (epoch seconds).")
    toolkit: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="The provider of the mailbox (gmail, outlook, ...), when the agent knows "
                    "it; with connection_id it names the mailbox, whose mail is summarised "
                    "apart from other mailboxes'.")
    connection_id: str | None = Field(
        default=None, min_length=1, max_length=256,
        description="The connected mailbox, unique within the toolkit.")

    @field_validator("to", mode="before")
    @classmethod
    def _single_recipient(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class DocumentIngested(Payload):
    source_id: str = Field(
        min_length=1, max_length=512, description="The document the chunk comes from.")
    chunk_id: str = Field(
        min_length=1, max_length=512,
        description="The chunk within its document; with source_id it identifies the chunk.")
    text: Text = Field(description="The chunk's text.")


class ProviderFields(Payload):
    """Account fields a connected provider reports; unknown fields are kept, not rejected,
    because each toolkit reports its own extras."""

    model_config = Payload.model_config | {"extra": "allow"}

    email: str | None = Field(default=None, description="The account's email address.")
    name: str | None = Field(default=None, description="The user's name on the account.")
    timezone: str | None = Field(
        default=None, description="The user's time zone (IANA name, e.g. Europe/Paris).")
    role: str | None = Field(default=None, description="The user's role or title.")
    employer: str | None = Field(default=None, description="The user's organisation.")


class ProviderProfileSynced(Payload):
    toolkit: str = Field(
        min_length=1, max_length=128, description="The provider (gmail, github, slack, ...).")
    connection_id: str = Field(
        min_length=1, max_length=256,
        description="The connected account, unique within the toolkit.")
    fields: ProviderFields = Field(
        description="What the provider reports about the user; unknown fields are kept.")
    # When the provider was read: with it, each sync is its own event (see NATURAL_KEYS).
    synced_at: Timestamp | None = Field(
        default=None, ge=0,
        description="When the provider was read (epoch seconds); with it, each sync is its own "
                    "event.")


class TraceStep(Payload):
    step_type: str = Field(
        min_length=1, max_length=64, description="What the step was (llm, tool, retrieval, ...).")
    timestamp: Timestamp = Field(ge=0, description="When the step started (epoch seconds).")
    duration_seconds: float = Field(ge=0, description="How long it took.")
    input: Any = Field(default=None, description="What the step was given (any JSON).")
    output: Any = Field(default=None, description="What it produced (any JSON).")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Anything else the agent records about the step.")


class TraceCompleted(Payload):
    trace_id: str = Field(
        min_length=1, max_length=128, description="The run's id; a re-sent trace is a duplicate.")
    query: Text = Field(description="What the agent was asked.")
    agent: str = Field(min_length=1, max_length=128, description="The agent that ran.")
    model: str = Field(
        min_length=1, max_length=256,
        description="The model it used; the router learns which model suits which query.")
    engine: str = Field(
        min_length=1, max_length=128, description="The runtime or framework that ran it.")
    steps: list[TraceStep] = Field(
        default_factory=list, max_length=1024, description="The run, step by step, in order.")
    result: Text = Field(description="What the agent answered.")
    outcome: Literal["success", "failure", "partial", "unknown"] | None = Field(
        default=None, description="How the run went, if known.")
    feedback: float | None = Field(
        default=None, ge=0, le=1,
        description="A score from 0 (bad) to 1 (good), if given with the trace.")
    started_at: Timestamp = Field(ge=0, description="When the run started (epoch seconds).")
    ended_at: Timestamp = Field(
        ge=0, description="When it ended (epoch seconds); not before started_at.")
    total_tokens: int = Field(ge=0, description="Tokens used by the whole run.")
    total_latency_seconds: float = Field(ge=0, description="How long the whole run took.")
    cost_usd: float | None = Field(
        default=None, ge=0, description="What the run cost, in US dollars.")
    decision_id: str | None = Field(
        default=None, min_length=1, max_length=128, description=(
            "The routing decision the run followed (`router.select_model`'s `decision_id`): "
            "joins the run's outcome to the decision, for off-policy estimates."))

    @model_validator(mode="after")
    def _ordered(self) -> TraceCompleted:
        if self.ended_at < self.started_at:
            raise ValueError("ended_at must not be before started_at")
        return self


class FeedbackGiven(Payload):
    trace_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="The trace the score is for (this or turn_id is required).")
    turn_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="The turn the score is for (this or trace_id is required).")
    score: float = Field(ge=0, le=1, description="From 0 (bad) to 1 (good).")
    outcome: Literal["success", "failure", "partial", "unknown"] | None = Field(
        default=None, description="How it went, if known.")

    @model_validator(mode="after")
    def _target(self) -> FeedbackGiven:
        if self.trace_id is None and self.turn_id is None:
            raise ValueError("one of trace_id or turn_id is required")
        return self


class ExtractionWindowDue(Payload):
    """The extractor's own tick, on the ingest stream so that it is ordered with the material
    it closes: a window that stopped growing is summarised at the tick's place in the stream,
    which a replay finds in the same place (a wall-clock timer would not)."""

    source: str = Field(
        min_length=1, max_length=600,
        description="The source whose open window is due (`conversations`, `email`, "
                    "`document:<source_id>`).")
    window_opened_seq: int = Field(
        ge=1, description="The stream sequence of the window's first material: a window "
                          "opened after the tick was decided is not closed by it.")


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


def natural_event_id_of_item(payload_type: type[Payload], payload: Any, tenant_id: str,
                             user_id: Any) -> str | None:
    """`natural_event_id` from an item's payload as sent, before it is validated: the gateway
    then decodes each item once, with its id, rather than decoding it and copying the event to
    set the id (a fifth of what an item cost it). Only where every key value is already what
    validation keeps unchanged (a string; a float for a time): None otherwise (an int time, an
    absent `synced_at`, a wrong type), and the caller derives it from the validated payload.
    A property test holds the two equal."""
    fields = NATURAL_KEYS.get(payload_type)
    if fields is None or not isinstance(payload, dict) or not isinstance(user_id, str):
        return None
    parts = [payload_type.__name__, tenant_id, user_id]
    for name in fields:
        value = payload.get(name)
        if isinstance(value, str):
            parts.append(value)
        elif type(value) is float:
            parts.append(repr(value))
        else:
            return None
    return derived_event_id("ingest", *parts)


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
