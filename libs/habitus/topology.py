"""Which projection reads which events and emits which: the data flow, derived.

A command must answer only once every view it changes reflects it, and those views belong to
other services (a forgotten facet leaves the prompt only when the profile renderer applied the
`CacheRebuilt` the learning cache emitted). Each projection's handler table says what it reads
and its `emits` what it publishes; the flow is computed from the projection classes, so there
is no second table to keep in step.

Which projections run is the services' to say: `habitus.service.registry.topology()` is the
flow of the installed services (each one's projections plus its erasure projection), and the
service host builds the one its commands wait along. This module knows projections only, so
the service layer above can use it without it importing the services back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from habitus.bus.streams import EVENTS, INGEST
from habitus.events import CATALOG
from habitus.projection.base import Projection, durable_for, subject_for
from habitus.projection.partitions import PartitionKey, slot_for

__all__ = ("ProjectionInfo", "Topology", "subject_for")


@dataclass(frozen=True)
class ProjectionInfo:
    name: str
    #: the owning service's schema (it holds the checkpoint)
    schema: str
    #: event types it applies; all from one stream
    consumes: tuple[str, ...]
    #: event types it publishes as consequences
    emits: tuple[str, ...] = ()
    #: event types its service publishes later from what it stored and it reads again
    requeues: tuple[str, ...] = ()
    #: the slot its partitions key on
    partition_by: PartitionKey = "user"

    @classmethod
    def of(cls, projection: type[Projection]) -> ProjectionInfo:
        return cls(projection.name, projection.schema, projection.consumes,
                   projection.emitted_types, projection.requeued_types,
                   projection.partition_by)

    def slot_of(self, tenant_id: str, user_id: str) -> int:
        """The slot this projection reads the user's events under (by its partition key)."""
        return slot_for(self.partition_by, tenant_id, user_id)

    @property
    def stream(self) -> str:
        streams = {CATALOG.spec(t).stream for t in self.consumes}
        if len(streams) != 1:
            raise ValueError(f"{self.name} consumes from {sorted(streams)}: one stream only")
        return INGEST if streams == {"ingest"} else EVENTS

    @property
    def durable(self) -> str:
        return durable_for(self.name)

    def filter_subjects(self, tenant_id: str = "*", user_id: str = "*") -> list[str]:
        return [subject_for(t, tenant_id, user_id) for t in self.consumes]


class Topology:
    def __init__(self, projections: Iterable[ProjectionInfo]):
        self.projections = {p.name: p for p in projections}

    @classmethod
    def of(cls, projections: Iterable[type[Projection]]) -> Topology:
        """The flow of these projection classes (every one a service runs, erasures too)."""
        return cls(ProjectionInfo.of(p) for p in projections)

    def projection(self, name: str) -> ProjectionInfo:
        try:
            return self.projections[name]
        except KeyError:
            raise LookupError(f"no installed service runs the projection {name!r}") from None

    def readers_of(self, event_type: str) -> Iterator[ProjectionInfo]:
        return (p for p in self.projections.values() if event_type in p.consumes)

    def upstream_of(self, name: str) -> tuple[str, ...]:
        """The projections whose events `name` reads, itself included when its service
        requeues what it stored (sorted: the gateway's end-to-end lag walks these)."""
        p = self.projection(name)
        found = {q.name for q in self.projections.values() if set(q.emits) & set(p.consumes)}
        if p.requeues:
            found.add(name)
        return tuple(sorted(found))

    def in_flow_order(self) -> list[ProjectionInfo]:
        """Every projection after those whose events it reads (the ingest readers first), so
        waiting for them in this order waits for consequences after their causes."""
        emitters: dict[str, set[str]] = {}
        for p in self.projections.values():
            for event_type in p.emits:
                emitters.setdefault(event_type, set()).add(p.name)
        depth: dict[str, int] = {}

        def depth_of(name: str, seen: frozenset[str]) -> int:
            if name not in depth:
                sources = {e for t in self.projections[name].consumes
                           for e in emitters.get(t, ()) if e not in seen and e != name}
                depth[name] = 1 + max((depth_of(e, seen | {name}) for e in sources),
                                      default=-1)
            return depth[name]

        return sorted(self.projections.values(),
                      key=lambda p: (depth_of(p.name, frozenset()), p.name))
