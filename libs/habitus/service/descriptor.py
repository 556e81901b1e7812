"""A service, described once.

Everything that names a service (its entry point, the deploy files, the expected-services list of
the gateway's readiness check, the Prometheus scrape list, `habitus up`, the migrations, the data
flow commands wait along) reads this descriptor or is checked against it by a test, so the one
service that runs under four names (`stability_detector`, schema `learning`, RPC `learning.*`,
Deployment `stability-detector`) says so in one place.

What a service needs at run time is not bound later: `wire` gets the shared resources (bus,
database, cache, publisher, commands) and the service's settings once they exist and returns the
RPC handlers, projections and background tasks built on them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_settings import BaseSettings

from habitus.bus.rpc import RpcRegistry
from habitus.contract.rpc import METHODS, conformance_problems
from habitus.projection.base import Projection
from habitus.projection.erasure import erasure_for
from habitus.projection.runner import RunnerConfig
from habitus.service.context import ServiceContext

if TYPE_CHECKING:
    from fastapi import FastAPI

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DEPLOY = re.compile(r"^[a-z][a-z0-9-]*$")


class Background(Protocol):
    """A task a service runs beside its projections (a scheduler, ...)."""

    def start(self) -> Any: ...

    async def stop(self) -> None: ...


@dataclass
class Wiring:
    """What `wire` builds from the resources: the running parts of the service."""

    rpc: RpcRegistry = field(default_factory=RpcRegistry)
    projections: Sequence[Projection] = ()
    #: the service's own HTTP API (the gateway); others get the standard health app only
    http_app: FastAPI | None = None
    background: Sequence[Background] = ()
    #: why the service is off (an optional dependency, such as an LLM endpoint, is not
    #: configured): it answers its RPC methods and erases users, folds nothing else, runs no
    #: background work, and `/readyz` says so in its details (ready, not failing)
    disabled: str | None = None


Wire = Callable[[ServiceContext, Any], Awaitable[Wiring]]


async def _nothing(ctx: ServiceContext, settings: Any) -> Wiring:
    return Wiring()


@dataclass(frozen=True)
class ServiceDescriptor:
    #: the entry-point and process name (`habitus serve <name>`), a Python identifier
    name: str
    #: the name in compose, Kubernetes and Prometheus (DNS-safe)
    deploy_name: str
    #: the Postgres schema it owns (checkpoints, its tables, its migrations)
    schema: str | None = None
    #: the RPC method prefixes it answers (`learning` answers `learning.*`)
    rpc_prefixes: tuple[str, ...] = ()
    #: its projection classes; `wire` returns one instance of each
    projections: tuple[type[Projection], ...] = ()
    #: its settings class (environment variables with its own prefix), if it has one
    settings: type[BaseSettings] | None = None
    #: settings to use instead of reading the environment (tests)
    preset: BaseSettings | None = None
    wire: Wire = _nothing
    #: the package holding its migrations (`versions/` under it)
    migrations: str | None = None
    #: it serves the public HTTP API on HABITUS_HTTP_PORT (else only /metrics and health)
    public_http: bool = False
    runner_config: RunnerConfig = field(default_factory=RunnerConfig)
    #: `habitus up` runs its RPC methods in a process of their own (HABITUS_ROLE `rpc`) beside
    #: the one applying its projections (`projections`): for a service whose reads are on
    #: every agent turn's path, so a read never waits for the batch a projection is applying
    rpc_apart: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"service name {self.name!r}: lowercase letters, digits, _")
        if not _DEPLOY.match(self.deploy_name):
            raise ValueError(f"deploy name {self.deploy_name!r}: lowercase letters, digits, -")
        for projection in self.projections:
            if projection.schema != self.schema:
                raise ValueError(f"{projection.name} keeps its checkpoint in "
                                 f"{projection.schema}, not in {self.name}'s {self.schema}")
        if self.rpc_apart and not (self.rpc_prefixes and self.projections):
            raise ValueError(f"{self.name}: rpc_apart needs both RPC methods and projections")
        if self.projections and self.migrations is None:
            raise ValueError(f"{self.name} has projections but no migrations for its tables")

    @property
    def ping_method(self) -> str:
        return f"{self.name}.ping"

    def configured(self, settings: BaseSettings | None) -> ServiceDescriptor:
        """The same service with these settings instead of the environment's."""
        return self if settings is None else replace(self, preset=settings)

    def load_settings(self) -> Any:
        if self.preset is not None:
            return self.preset
        return self.settings() if self.settings is not None else None

    def answers(self, method: str) -> bool:
        return method.split(".", 1)[0] in self.rpc_prefixes

    def running_projections(self) -> list[type[Projection]]:
        """The projections as the service runs them: its own, then its erasure projection
        (what the data flow and `habitus replay` know it by)."""
        own = list(self.projections)
        if own and self.schema:
            own.append(erasure_for(self.schema, own))
        return own

    def check_wiring(self, wiring: Wiring) -> None:
        """What `wire` built must be what the descriptor says: the same projection classes
        (the data flow is computed from the descriptor), methods under its prefixes only."""
        built = sorted(type(p).__name__ for p in wiring.projections)
        declared = sorted(p.__name__ for p in self.projections)
        if built != declared:
            raise RuntimeError(f"{self.name}: wire built projections {built}, "
                               f"the descriptor declares {declared}")
        stray = [m for m in wiring.rpc.methods if not self.answers(m)]
        if stray:
            raise RuntimeError(f"{self.name}: methods {stray} are outside its RPC prefixes "
                               f"{list(self.rpc_prefixes)}")
        # Methods under the table's prefixes must be the table's (a test service may answer
        # methods of a prefix of its own).
        table_prefixes = {n.split(".", 1)[0] for n in METHODS}
        implemented = {m.name: m.params for m in wiring.rpc.methods.values()
                       if m.name.split(".", 1)[0] in table_prefixes}
        owned = {n: s for n, s in METHODS.items() if s.service == self.name or n in implemented}
        problems = conformance_problems({self.name: implemented}, owned)
        if problems:
            raise RuntimeError(f"{self.name} does not match the RPC table: {problems}")
