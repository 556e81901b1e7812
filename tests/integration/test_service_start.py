"""A service is ready when it has started, not when its broker has: a process joins its
service's ping (what `/readyz` and `habitus up`'s ready line wait for) only once it has
started (the producers load their statement reader in a process of their own, about two
seconds), and leaves it when it stops. On real servers, with the same host `habitus serve`
uses.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from habitus.bus import RpcClient, RpcError
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.service.host import ServiceHost
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = pytest.mark.asyncio


def held(name: str, go: asyncio.Event, wiring: asyncio.Event) -> ServiceDescriptor:
    """A service whose wiring waits for `go` (and sets `wiring` once it has begun)."""
    async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
        wiring.set()
        await go.wait()
        return Wiring()

    return ServiceDescriptor(name=name, deploy_name=name.replace("_", "-"), wire=wire)


async def test_a_service_is_not_ready_until_it_has_started_nor_once_it_stops(
        servers: ServerUrls, nc: Any) -> None:
    name = unique("slow").replace("-", "_")
    go, wiring = asyncio.Event(), asyncio.Event()
    rpc = RpcClient(nc, timeout=5)
    host = ServiceHost(held(name, go, wiring), servers.settings(), http_port=0)
    starting = asyncio.create_task(host.start())
    await asyncio.wait_for(wiring.wait(), 30)
    with pytest.raises(RpcError) as refused:  # at once, not after the call's timeout
        await rpc.call(f"{name}.ping", "system", {}, timeout=2)
    assert refused.value.code == "unavailable"
    go.set()
    await asyncio.wait_for(starting, 30)
    try:
        assert await rpc.call(f"{name}.ping", "system", {}) == {"status": "ok", "service": name}
    finally:
        await host.stop()
    with pytest.raises(RpcError) as gone:
        await rpc.call(f"{name}.ping", "system", {}, timeout=2)
    assert gone.value.code == "unavailable"


async def test_a_replica_starting_beside_a_running_one_leaves_the_service_ready(
        servers: ServerUrls, nc: Any) -> None:
    """A rolling update: the ping's queue group hands each ask to one member at random, and a
    member still starting must not be one (a "not yet" would make the gateway unready)."""
    name = unique("rolling").replace("-", "_")
    started, never = asyncio.Event(), asyncio.Event()
    started.set()
    rpc = RpcClient(nc, timeout=5)
    async with running(held(name, started, asyncio.Event()), servers.settings()):
        wiring = asyncio.Event()
        second = ServiceHost(held(name, never, wiring), servers.settings(), http_port=0)
        starting = asyncio.create_task(second.start())
        try:
            await asyncio.wait_for(wiring.wait(), 30)
            answers = [await rpc.call(f"{name}.ping", "system", {}) for _ in range(30)]
            assert answers == [{"status": "ok", "service": name}] * 30
        finally:
            starting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await starting
            await second.stop()
