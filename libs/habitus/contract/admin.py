"""Parameters and results of `admin.*`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from habitus.ids import CallerUserId as UserId


class EraseUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UserId = Field(description="The user to erase, in the caller's tenant.")
    reason: str | None = Field(default=None, max_length=500, description=(
        "Why, for the audit trail; kept on the tombstone, so never the user's data."))


class UserErasedResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str = Field(description="The erased user.")
    tombstone_seq: int = Field(description=(
        "Stream sequence of the `UserErased` event, the only event of the user left."))
    projections: list[str] = Field(description="The views that dropped the user.")
    purged_messages: int = Field(description=(
        "Messages of the user removed from the ingest, events and dead-letter streams."))
