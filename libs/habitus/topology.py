"""Which projection reads which events and emits which: the data flow, in one table.

A command must answer only once every view it changes reflects it, and those views belong to
other services (a forgotten facet leaves the prompt only when the profile renderer applied the
`CacheRebuilt` the learning cache emitted). A service may not import another, so the flow is
declared here, beside the event catalog; each projection takes its subject filters from its
entry, and a test checks that every registered projection matches the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from habitus.bus.streams import EVENTS, INGEST
from habitus.events import CATALOG
from habitus.subjects import EVENT_ROOT, INGEST_ROOT


@dataclass(frozen=True)
class ProjectionInfo:
    name: str
    #: the owning service's schema (it holds the checkpoint)
    schema: str
    #: event types it applies; all from one stream
    consumes: tuple[str, ...]
    #: event types it publishes as consequences
    emits: tuple[str, ...] = ()

    @property
    def stream(self) -> str:
        streams = {CATALOG.spec(t).stream for t in self.consumes}
        if len(streams) != 1:
            raise ValueError(f"{self.name} consumes from {sorted(streams)}: one stream only")
        return INGEST if streams == {"ingest"} else EVENTS

    def filter_subjects(self, tenant_id: str = "*", user_id: str = "*") -> list[str]:
        return [subject_for(t, tenant_id, user_id) for t in self.consumes]


def subject_for(event_type: str, tenant_id: str = "*", user_id: str = "*") -> str:
    """The subject (or filter, with wildcards) carrying `event_type` for a tenant and user."""
    spec = CATALOG.spec(event_type)
    if spec.stream == "ingest":
        return f"{INGEST_ROOT}.{spec.kind}.{tenant_id}.{user_id}"
    return f"{EVENT_ROOT}.{event_type}.{tenant_id}.{user_id}"


_LEARNING_COMMANDS = ("FacetPinned", "FacetUnpinned", "FacetForgotten", "FacetUpdated",
                      "CacheResetRequested")

PROJECTIONS: dict[str, ProjectionInfo] = {p.name: p for p in (
    ProjectionInfo("producers.candidates", "producers",
                   consumes=("TurnRecorded", "EmailObserved", "ProviderProfileSynced"),
                   emits=("CandidateEmitted", "FacetUpdated")),
    ProjectionInfo("learning.cache", "learning",
                   consumes=("CandidateEmitted", *_LEARNING_COMMANDS, "RebuildRequested"),
                   emits=("CacheRebuilt",)),
    ProjectionInfo("profile.accounts", "profile", consumes=("ProviderProfileSynced",),
                   emits=("ConnectedAccountSynced",)),
    ProjectionInfo("profile.render", "profile",
                   consumes=("CacheRebuilt", "ConnectedAccountSynced", "ToolRuleUpserted",
                             "ToolRuleDeleted", "ProfileNotesSaved"),
                   emits=("ProfileRendered",)),
)}


def projection(name: str) -> ProjectionInfo:
    try:
        return PROJECTIONS[name]
    except KeyError:
        raise LookupError(f"{name} is not in habitus.topology.PROJECTIONS") from None


def readers_of(event_type: str) -> Iterator[ProjectionInfo]:
    return (p for p in PROJECTIONS.values() if event_type in p.consumes)
