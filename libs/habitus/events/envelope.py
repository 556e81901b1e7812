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

    event_id: EventId
    type: str = Field(pattern=r"^[A-Z][A-Za-z0-9]{1,63}$")
    schema_version: int = Field(default=1, ge=1)
    tenant_id: TenantId
    user_id: UserId
    occurred_at: float = Field(ge=0)
    producer: str = Field(min_length=1, max_length=128)
    causation_id: str | None = Field(default=None, max_length=64)
    correlation_id: str | None = Field(default=None, max_length=64)
    payload: P

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()

    def envelope_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"payload"})
