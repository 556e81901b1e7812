"""Evidence references: every belief points back to the ingest events it came from.

A tagged union (`{"type": "turn", ...}`) so provenance survives serialisation and a UI can link
each variant to its source.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from habitus.events.envelope import Payload


class TurnRef(Payload):
    type: Literal["turn"] = "turn"
    session_id: str
    turn_id: str


class TurnWindowRef(Payload):
    type: Literal["turn_window"] = "turn_window"
    session_id: str
    from_turn_id: str
    to_turn_id: str


class EmailMessageRef(Payload):
    type: Literal["email_message"] = "email_message"
    message_id: str


class DocumentChunkRef(Payload):
    type: Literal["document_chunk"] = "document_chunk"
    source_id: str
    chunk_id: str


class ProviderRef(Payload):
    type: Literal["provider"] = "provider"
    toolkit: str
    connection_id: str
    field: str


class ToolCallRef(Payload):
    type: Literal["tool_call"] = "tool_call"
    tool_name: str
    turn_id: str


class SourceSummaryRef(Payload):
    type: Literal["source_summary"] = "source_summary"
    summary_id: str


class TraceRef(Payload):
    type: Literal["trace"] = "trace"
    trace_id: str


EvidenceRef = Annotated[
    TurnRef
    | TurnWindowRef
    | EmailMessageRef
    | DocumentChunkRef
    | ProviderRef
    | ToolCallRef
    | SourceSummaryRef
    | TraceRef,
    Field(discriminator="type"),
]
