"""A service split over processes by role (HABITUS_ROLE), on real servers: the profile renderer
as `habitus up` runs it, one process applying its projections and another answering its RPC.

A `projections` process must not answer the service's methods (a queue group would hand it a
share of the reads, to answer behind its batches), an `rpc` process must apply nothing, and the
two together must behave as one process: a command answered by the RPC process waits for the
view the other process builds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from habitus.bus import RpcClient, RpcError
from habitus.events import CATALOG
from habitus.events.domain import CacheRebuilt
from habitus.projection.wait import wait_applied
from habitus.service.migrations import migrate
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = pytest.mark.asyncio

NOW = 1_790_000_000.0


def rebuilt(verbosity: str) -> CacheRebuilt:
    """What the learning cache publishes once the user's verbosity is stable."""
    return CacheRebuilt.model_validate({
        "as_of": NOW, "added": 1, "evicted": 0, "kept": 0, "total_size": 1,
        "active": [{"class": "style", "key": "verbosity", "value": verbosity,
                    "stability": 3.0}], "provisional": []})


async def test_projections_apart_from_rpc_behave_as_one_process(
        servers: ServerUrls, nc: Any, pool: Any) -> None:
    migrate(servers.database)
    rpc = RpcClient(nc, timeout=5)
    tenant, user = unique("tn"), "maria"
    base = servers.settings()
    async with running(profile_renderer(), base.model_copy(update={"role": "projections"})
                       ) as batches:
        assert {r.projection.name for r in batches.runners} >= {"profile.render",
                                                                "profile.accounts"}
        # Alone, the projections process answers its ping but none of the service's methods.
        pong = await rpc.call("profile_renderer.ping", tenant, {})
        assert pong["service"] == "profile_renderer"
        with pytest.raises(RpcError) as refused:
            await rpc.call("prompt.context", tenant, {"user_id": user})
        assert refused.value.code == "unavailable"

        async with running(profile_renderer(), base.model_copy(update={"role": "rpc"})
                           ) as reads:
            assert reads.runners == []  # nothing applied here
            event = CATALOG.new(rebuilt("terse"), tenant_id=tenant, user_id=user,
                                producer="tests", occurred_at=NOW)
            seq = (await batches.ctx.publisher.publish(event)).seq  # type: ignore[union-attr]
            await wait_applied(pool, "profile", "profile.render", seq)
            context = await rpc.call("prompt.context", tenant, {"user_id": user})
            assert "**style/verbosity**: terse" in context["text"]
            doc = await rpc.call("profile.get", tenant, {"user_id": user})
            # A command answered by the RPC process waits for the other process's render.
            saved = await rpc.call("profile.save_notes", tenant, {
                "user_id": user, "markdown": doc["markdown"] + "\nI travel a lot.\n",
                "base_version": doc["version"]})
            after = await rpc.call("profile.get", tenant, {"user_id": user})
            assert after["version"] == saved["version"] > doc["version"]
            assert "I travel a lot." in after["markdown"]


def _task_names() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks()}


async def test_an_rpc_process_starts_no_background_work(servers: ServerUrls) -> None:
    """The learning scheduler (periodic rebuilds) runs beside the projections, never in a read
    replica: two replicas would each schedule the same rebuilds."""
    migrate(servers.database)
    service = learning(LearningSettings(scheduler_enabled=True))
    async with running(service, servers.settings()) as whole:
        assert whole.runners and "learning.scheduler" in _task_names()
    async with running(service, servers.settings().model_copy(update={"role": "rpc"})
                       ) as reads:
        assert reads.runners == []
        assert "learning.scheduler" not in _task_names()
