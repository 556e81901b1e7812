"""Domain events on HABITUS_EVENTS: what Habitus concluded, and the commands users gave it.

Each payload is owned by the service that publishes it; the fields here are the contract other
services subscribe to. New fields must be optional (or a new schema_version with an upcaster).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from habitus.events.envelope import Payload
from habitus.events.evidence import EvidenceRef


class FacetClass(StrEnum):
    STYLE = "style"
    IDENTITY = "identity"
    TOOLING = "tooling"
    VETO = "veto"
    GOAL = "goal"
    CHANNEL = "channel"


class CueFamily(StrEnum):
    EXPLICIT = "explicit"
    STRUCTURAL = "structural"
    BEHAVIORAL = "behavioral"
    RECURRENCE = "recurrence"


class FacetState(StrEnum):
    ACTIVE = "active"
    PROVISIONAL = "provisional"
    CANDIDATE = "candidate"
    DROPPED = "dropped"


class UserState(StrEnum):
    AUTO = "auto"
    PINNED = "pinned"
    FORGOTTEN = "forgotten"


FacetKey = Field(min_length=1, max_length=200, pattern=r"^[^\s/][^\s]*$")


class FacetRef(Payload):
    class_: FacetClass = Field(alias="class")
    key: str = FacetKey


class CandidateEmitted(Payload):
    class_: FacetClass = Field(alias="class")
    key: str = FacetKey
    value: str = Field(min_length=1, max_length=2000)
    cue_family: CueFamily
    evidence: list[EvidenceRef] = Field(default_factory=list, max_length=64)
    initial_confidence: float = Field(ge=0, le=1)
    observed_at: float = Field(ge=0)
    producer: str = Field(min_length=1, max_length=128)


class FacetPinned(FacetRef):
    #: the value pinned (the active value when the user pinned it), so the log alone says
    #: what a pinned facet holds after later evidence or a reset; absent, the value winning
    #: at the time of the pin is held
    value: str | None = Field(default=None, min_length=1, max_length=2000)


class FacetUnpinned(FacetRef):
    pass


class FacetForgotten(FacetRef):
    pass


class FacetUpdated(FacetRef):
    value: str = Field(min_length=1, max_length=2000)


class CacheResetRequested(Payload):
    reason: str | None = Field(default=None, max_length=500)


class RebuildRequested(Payload):
    as_of: float = Field(ge=0)
    scope: Literal["user", "periodic", "manual"] = "user"
    reason: str | None = Field(default=None, max_length=500)


class FacetChange(Payload):
    class_: FacetClass = Field(alias="class")
    key: str
    old_value: str | None = None
    new_value: str | None = None
    old_state: FacetState | None = None
    new_state: FacetState | None = None


class ActiveFacet(Payload):
    class_: FacetClass = Field(alias="class")
    key: str
    value: str
    #: None when pinned (a pinned facet's stability is infinite: it never decays)
    stability: float | None
    user_state: UserState = UserState.AUTO


class CacheRebuilt(Payload):
    as_of: float = Field(ge=0)
    added: int = Field(ge=0)
    evicted: int = Field(ge=0)
    kept: int = Field(ge=0)
    total_size: int = Field(ge=0)
    changes: list[FacetChange] = Field(default_factory=list)
    active: list[ActiveFacet] = Field(default_factory=list)


class ProfileRendered(Payload):
    version: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    blocks_changed: list[str] = Field(default_factory=list)


class ProfileNotesSaved(Payload):
    markdown: str = Field(max_length=1_000_000)
    base_version: int = Field(ge=0)


class RulePriority(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class ToolRuleUpserted(Payload):
    rule_id: str = Field(min_length=1, max_length=128)
    tool_name: str = Field(min_length=1, max_length=128)
    rule: str = Field(min_length=1, max_length=4000)
    priority: RulePriority = RulePriority.NORMAL
    source: str = Field(default="user", max_length=64)
    tags: list[str] = Field(default_factory=list, max_length=32)


class ToolRuleDeleted(Payload):
    rule_id: str = Field(min_length=1, max_length=128)
    tool_name: str = Field(min_length=1, max_length=128)


class RouteDecided(Payload):
    query_id: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=256)
    policy: str = Field(min_length=1, max_length=128)
    reason: str | None = Field(default=None, max_length=2000)
    scores: dict[str, float] = Field(default_factory=dict)


class RoutingPolicyUpdated(Payload):
    policy: str = Field(min_length=1, max_length=128)
    version: int = Field(ge=1)
    parameters: dict[str, Any] = Field(default_factory=dict)


class ConnectedAccountSynced(Payload):
    """A provider sync seen on the ingest stream, restated as a domain event so the profile's
    document is rendered from one stream, in one order."""

    toolkit: str = Field(min_length=1, max_length=128)
    connection_id: str = Field(min_length=1, max_length=256)
    label: str = Field(default="", max_length=512)


class UserErased(Payload):
    reason: str | None = Field(default=None, max_length=500)


class HabitSuggested(Payload):
    habit_id: str = Field(min_length=1, max_length=128)
    when: str = Field(min_length=1, max_length=2000)
    do: str = Field(min_length=1, max_length=2000)
    evidence: list[EvidenceRef] = Field(default_factory=list, max_length=64)


class HabitApproved(Payload):
    habit_id: str = Field(min_length=1, max_length=128)


class HabitRejected(Payload):
    habit_id: str = Field(min_length=1, max_length=128)
    reason: str | None = Field(default=None, max_length=2000)


class HabitEdited(Payload):
    habit_id: str = Field(min_length=1, max_length=128)
    when: str = Field(min_length=1, max_length=2000)
    do: str = Field(min_length=1, max_length=2000)


class HabitRetired(Payload):
    habit_id: str = Field(min_length=1, max_length=128)
    reason: str | None = Field(default=None, max_length=2000)
