"""What a service declares; the host does the rest.

An explicit declaration (name, projections, RPC table, optional HTTP app, hooks) instead of
import-time side effects, so `habitus serve <name>` and the tests build the same service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from habitus.bus.rpc import RpcRegistry
from habitus.projection.base import Projection
from habitus.projection.runner import RunnerConfig

if TYPE_CHECKING:
    from fastapi import FastAPI

    from habitus.service.context import ServiceContext

Hook = Callable[["ServiceContext"], Awaitable[None]]


@dataclass
class ServiceSpec:
    name: str
    projections: Callable[[ServiceContext], Sequence[Projection]] = lambda ctx: ()
    rpc: RpcRegistry = field(default_factory=RpcRegistry)
    #: the service's own HTTP API (the gateway); others get the standard health app only
    http_app: Callable[[ServiceContext], FastAPI] | None = None
    on_start: Sequence[Hook] = ()
    on_stop: Sequence[Hook] = ()
    runner_config: RunnerConfig = field(default_factory=RunnerConfig)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ping_method(self) -> str:
        return f"{self.name}.ping"
