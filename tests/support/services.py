"""Running real services in-process for tests: the same ServiceHost `habitus serve` uses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.config import Settings
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.service.host import ServiceHost


class WhoAmI(BaseModel):
    user_id: str
    fail: str | None = None


def echo_spec(name: str = "echo") -> ServiceDescriptor:
    """A tiny service answering `<name>.whoami`: shows which tenant the gateway forwarded."""
    registry = RpcRegistry()

    @registry.method(f"{name}.whoami", WhoAmI)
    async def whoami(params: WhoAmI, ctx: RpcContext) -> dict[str, Any]:
        if params.fail:
            raise RpcError(params.fail, f"asked to fail with {params.fail}")
        return {"tenant_id": ctx.tenant_id, "user_id": params.user_id}

    async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
        return Wiring(rpc=registry)

    return ServiceDescriptor(name=name, deploy_name=name.replace("_", "-"),
                             rpc_prefixes=(name,), wire=wire)


@asynccontextmanager
async def running(spec: ServiceDescriptor, settings: Settings) -> AsyncIterator[ServiceHost]:
    host = ServiceHost(spec, settings, http_port=0)
    await host.start()
    try:
        yield host
    finally:
        await host.stop()


@asynccontextmanager
async def every_service(settings: Settings, presets: dict[str, Any] | None = None
                        ) -> AsyncIterator[ServiceHost]:
    """Every installed service (a service added later included), the gateway last; yields the
    gateway's host. `presets` replaces a service's settings by its name."""
    from contextlib import AsyncExitStack

    from habitus.service import registry

    descriptors = registry.services()
    ordered = [d for d in descriptors if not d.public_http] + [
        d for d in descriptors if d.public_http]
    async with AsyncExitStack() as stack:
        host = None
        for descriptor in ordered:
            preset = (presets or {}).get(descriptor.name)
            host = await stack.enter_async_context(running(descriptor.configured(preset),
                                                           settings))
        assert host is not None
        yield host
