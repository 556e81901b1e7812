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


class PartitionsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    projections: list[str] | None = Field(default=None, max_length=100, description=(
        "Only these projections (e.g. `learning.cache`); absent: every installed one."))


class PartitionStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")
    projection: str = Field(description="The projection, e.g. `learning.cache`.")
    partition: str = Field(description="`<index>/<count>`: which of its partitions (0/1: "
                                       "the projection is not split).")
    state: str = Field(description=(
        "`active`; `draining` (it applies up to `cutover`, then goes: a repartition); "
        "`pending` (a new partition waiting for the old ones to drain)."))
    owner: str | None = Field(description="The replica that claimed it last (absent: never).")
    owner_alive: bool = Field(description="Whether that replica's lease is alive.")
    checkpoint: int = Field(description="Stream sequence up to which it has applied its events.")
    stream_seq: int = Field(description="The stream's last sequence on its subjects.")
    behind: int = Field(description="Stream sequences between the two (0: caught up).")
    pending: int | None = Field(description=(
        "Its consumer's deliveries not yet made (absent: no consumer now)."))
    ack_pending: int | None = Field(description="Deliveries not yet acknowledged.")
    cutover: int | None = Field(description="Where a draining partition stops.")
    stream: str = Field(description="The JetStream stream it reads.")
    durable: str = Field(description="Its durable consumer's name.")


class Partitions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: list[PartitionStatus] = Field(description=(
        "Every partition of the projections asked about, in the order of the data flow."))
