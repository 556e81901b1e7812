"""The installed services: one `habitus.services` entry point each, naming its descriptor.

Descriptors are discovered, never imported by name, so no service imports another and a new one
is found by installing it. Everything derived from "the services" (the data flow, the
migrations, `habitus up`, the deploy-file checks) takes the list from here, or from a list a test
passes instead; the data flow of the installed services is `topology()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from importlib.metadata import entry_points

from habitus.projection.base import Projection
from habitus.service.descriptor import ServiceDescriptor
from habitus.topology import Topology

GROUP = "habitus.services"


def _check(found: Sequence[ServiceDescriptor]) -> None:
    for attr in ("name", "deploy_name"):
        dupes = [v for v, n in Counter(getattr(s, attr) for s in found).items() if n > 1]
        if dupes:
            raise ValueError(f"two services share the {attr} {dupes}")
    owners = Counter(s.schema for s in found if s.schema)
    if any(n > 1 for n in owners.values()):
        raise ValueError(f"a schema is owned twice: {owners}")
    prefixes = Counter(p for s in found for p in s.rpc_prefixes)
    if any(n > 1 for n in prefixes.values()):
        raise ValueError(f"an RPC prefix is answered by two services: {prefixes}")
    names = Counter(p.name for s in found for p in s.projections)
    if any(n > 1 for n in names.values()):
        raise ValueError(f"a projection name is used twice: {names}")


@cache
def _installed() -> tuple[ServiceDescriptor, ...]:
    found = []
    for ep in entry_points(group=GROUP):
        descriptor = ep.load()
        if not isinstance(descriptor, ServiceDescriptor):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a ServiceDescriptor")
        if descriptor.name != ep.name:
            raise ValueError(f"entry point {ep.name} names the service {descriptor.name}")
        found.append(descriptor)
    found.sort(key=lambda s: s.name)
    _check(found)
    return tuple(found)


def services(extra: Iterable[ServiceDescriptor] = ()) -> list[ServiceDescriptor]:
    """The installed services (sorted by name), plus `extra` (a test's example service)."""
    found = [*_installed(), *extra]
    _check(found)
    return sorted(found, key=lambda s: s.name)


def service(name: str) -> ServiceDescriptor:
    for descriptor in _installed():
        if descriptor.name == name:
            return descriptor
    known = ", ".join(s.name for s in _installed())
    raise LookupError(f"unknown service {name!r}; installed: {known}")


def projection_classes(found: Iterable[ServiceDescriptor] | None = None
                       ) -> dict[str, type[Projection]]:
    return {p.name: p for s in (services() if found is None else found) for p in s.projections}


def owner_of(projection: str) -> ServiceDescriptor:
    for descriptor in _installed():
        if any(p.name == projection for p in descriptor.projections):
            return descriptor
        if descriptor.schema and projection == f"{descriptor.schema}.erasure":
            return descriptor
    raise LookupError(f"no installed service runs the projection {projection!r}")


def topology_of(found: Iterable[ServiceDescriptor]) -> Topology:
    """The data flow of these services: every projection each runs, its erasure included."""
    return Topology.of(p for s in found for p in s.running_projections())


@cache
def topology() -> Topology:
    """The data flow of the installed services."""
    return topology_of(services())
