"""Evidence references: every belief points back to the ingest events it came from.

A tagged union (`{"type": "turn", ...}`) so provenance survives serialisation and a UI can link
each variant to its source.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from habitus.events.envelope import Payload


class TurnRef(Payload):
    type: Literal["turn"] = Field(default="turn", description="A chat turn.")
    session_id: str = Field(description="The turn's session.")
    turn_id: str = Field(description="The turn.")


class TurnWindowRef(Payload):
    type: Literal["turn_window"] = Field(
        default="turn_window", description="A run of consecutive turns.")
    session_id: str = Field(description="The turns' session.")
    from_turn_id: str = Field(description="The first turn of the run.")
    to_turn_id: str = Field(description="The last turn of the run.")


class EmailMessageRef(Payload):
    type: Literal["email_message"] = Field(default="email_message", description="An email.")
    message_id: str = Field(description="The email's message id.")


class DocumentChunkRef(Payload):
    type: Literal["document_chunk"] = Field(
        default="document_chunk", description="A document chunk.")
    source_id: str = Field(description="The document.")
    chunk_id: str = Field(description="The chunk.")


class ProviderRef(Payload):
    type: Literal["provider"] = Field(
        default="provider", description="A field of a connected account.")
    toolkit: str = Field(description="The provider.")
    connection_id: str = Field(description="The connected account.")
    field: str = Field(description="The account field, e.g. `timezone`.")


class ToolCallRef(Payload):
    type: Literal["tool_call"] = Field(default="tool_call", description="A tool call.")
    tool_name: str = Field(description="The tool called.")
    turn_id: str = Field(description="The turn it was called in.")


class SourceSummaryRef(Payload):
    type: Literal["source_summary"] = Field(
        default="source_summary", description="A summary of several sources.")
    summary_id: str = Field(description="The summary.")


class AgentTraceRef(Payload):
    type: Literal["trace"] = Field(default="trace", description="An agent run.")
    trace_id: str = Field(description="The trace.")


EvidenceRef = Annotated[
    TurnRef
    | TurnWindowRef
    | EmailMessageRef
    | DocumentChunkRef
    | ProviderRef
    | ToolCallRef
    | SourceSummaryRef
    | AgentTraceRef,
    Field(discriminator="type"),
]
