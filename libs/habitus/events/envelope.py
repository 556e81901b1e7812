"""The event envelope: fixed for every event type, forever.

Payloads may grow (new optional fields, new schema versions upcast on read), the envelope cannot:
every consumer, the DLQ and the gateway rely on these fields being present and valid.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from habitus.ids import EventId, TenantId, UserId

P = TypeVar("P", bound=BaseModel)

ENVELOPE_FIELDS = (
    "event_id",
    "type",
    "schema_version",
    "tenant_id",
    "user_id",
    "occurred_at",
    "producer",
    "causation_id",
    "correlation_id",
    "payload",
)


class Payload(BaseModel):
    """Base of every payload: strict about unknown fields so a typo is an error, not data loss."""

    # Infinity/NaN are not JSON: an event carrying one could be stored but never read back.
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False
    )


class Event(BaseModel, Generic[P]):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    event_id: EventId = Field(description=(
        "Unique id (a UUID or a ULID). Scoped to the tenant and user it is also the stream's "
        "deduplication key, so publishing the same id again stores nothing new; the gateway "
        "derives it from the item's natural key when the client sends none."))
    type: str = Field(pattern=r"^[A-Z][A-Za-z0-9]{1,63}$",
                      description="The event type, PascalCase past tense (TurnRecorded).")
    schema_version: int = Field(default=1, ge=1, description=(
        "Version of the payload schema; an older version is upcast when read."))
    tenant_id: TenantId = Field(description=(
        "The tenant (platform customer); at the gateway it comes from the API key."))
    user_id: UserId = Field(description="The user the event is about, within the tenant.")
    occurred_at: float = Field(ge=0, description=(
        "When it happened, epoch seconds (UTC); the gateway fills in the time of receipt."))
    producer: str = Field(min_length=1, max_length=128, description=(
        "The service or client that published the event."))
    causation_id: str | None = Field(default=None, max_length=64, description=(
        "The id of the event that caused this one, when another event did."))
    correlation_id: str | None = Field(default=None, max_length=64, description=(
        "The request everything started from, carried along the chain of caused events."))
    payload: P = Field(description="The type-specific body.")

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()

    def envelope_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"payload"})
