"""A service is ready when it has started, not when its broker has: its ping (what `/readyz`
and `habitus up`'s ready line wait for) answers "starting" while the service is still wiring
itself (the producers load their statement reader in a process of their own, about two
seconds), and "ok" once it is done. On real servers, with the same host `habitus serve` uses.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from habitus.bus import RpcClient, RpcError
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = pytest.mark.asyncio


def slow_to_start(name: str, go: asyncio.Event, wiring: asyncio.Event) -> ServiceDescriptor:
    """A service whose wiring waits for `go` (set `wiring` once it has begun)."""
    async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
        wiring.set()
        await go.wait()
        return Wiring()

    return ServiceDescriptor(name=name, deploy_name=name.replace("_", "-"), wire=wire)


async def test_a_service_still_wiring_answers_its_ping_starting_then_ok(
        servers: ServerUrls, nc: Any) -> None:
    name = unique("slow").replace("-", "_")
    go, wiring = asyncio.Event(), asyncio.Event()
    rpc = RpcClient(nc, timeout=5)
    starting = asyncio.create_task(running(slow_to_start(name, go, wiring),
                                           servers.settings()).__aenter__())
    await asyncio.wait_for(wiring.wait(), 30)
    with pytest.raises(RpcError) as refused:
        await rpc.call(f"{name}.ping", "system", {})
    assert refused.value.code == "unavailable"
    assert "starting" in refused.value.message
    go.set()
    host = await asyncio.wait_for(starting, 30)
    try:
        pong = await rpc.call(f"{name}.ping", "system", {})
        assert pong == {"status": "ok", "service": name}
    finally:
        await host.stop()
