"""The event envelope: fixed for every event type, forever.

Payloads may grow (new optional fields, new schema versions upcast on read), the envelope cannot:
every consumer, the DLQ and the gateway rely on these fields being present and valid.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from habitus.ids import EventId, TenantId, UserId, check_id

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

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Event(BaseModel, Generic[P]):
    model_config = ConfigDict(extra="forbid", frozen=True)

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

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_id(v, "tenant_id")

    @field_validator("user_id")
    @classmethod
    def _user(cls, v: str) -> str:
        return check_id(v, "user_id")

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()

    def envelope_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"payload"})
