"""The trace-router service: traces and feedback in, their analysis, routing that learns.

Process `trace_router`, Deployment `trace-router`, schema `traces`, RPC `router.*`,
`traces.*`, `advisor.*`, `icl.*`.
"""

from __future__ import annotations

import asyncio
import logging

from habitus.db.leader import LeaderLock
from habitus.projection import RunnerConfig
from habitus.projection.checkpoints import CheckpointStore
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.tasks import stop_task
from services.trace_router import facts, store
from services.trace_router.policy_projection import PoliciesProjection
from services.trace_router.projection import TracesProjection
from services.trace_router.rpc import (
    RouterRpc,
    TenantRouting,
    publish_advice,
    publish_update,
)
from services.trace_router.settings import RouterSettings
from services.trace_router.state_cache import StateCache

log = logging.getLogger(__name__)
#: the policies whose parameters are learned from the traces (the heuristic has none)
LEARNING = ("learned", "sft", "bandit", "grpo")


#: under traffic that never pauses, relearn at least every this many ticks all the same
MAX_QUIET_WAIT_TICKS = 12


def relearn_due(at: int, relearned: int, previous: int, waited: int) -> bool:
    """Whether to relearn at this tick: something is new since the last relearn, and either
    nothing arrived since the previous tick (the traces paused: a debounce, so a burst is
    learned from once, not every tick while it arrives and competes with its ingest) or the
    wait under steady traffic reached MAX_QUIET_WAIT_TICKS."""
    return at != relearned and (at == previous or waited >= MAX_QUIET_WAIT_TICKS)


class Relearner:
    """Recomputes every tenant's learned policies once new traces stopped arriving for
    `relearn_seconds` (one replica at a time), and publishes those that changed.

    This is what makes the default policy (`learned`) follow the traces without an operator:
    every tenant with traces gets its tables published, whether or not it ever called
    `router.update_policy`. A decision does not wait for it (a class with enough traces is
    routed by the aggregates at once); the published table is what keeps replicas, restarts
    and replays routing alike. The tenant's advice is issued then too (`AdviceIssued`), when
    it changed."""

    def __init__(self, ctx: ServiceContext, settings: RouterSettings):
        self._ctx = ctx
        self._settings = settings
        self._lock = LeaderLock(str(ctx.pool.conninfo), "traces.relearn")
        self._task: asyncio.Task[None] | None = None
        self._seen = -1  # the checkpoint last relearned at
        self._previous = -1  # the checkpoint at the previous tick
        self._waited = 0  # ticks since something new first went unlearned

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="traces.relearn")

    async def stop(self) -> None:
        await stop_task(self._task)
        await self._lock.release()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._settings.relearn_seconds)
            try:
                if await self._lock.try_acquire():
                    await self.relearn()
            except Exception as exc:  # an outage pauses learning; routing goes on
                log.warning("relearn failed", extra={"error": repr(exc)})

    async def relearn(self) -> None:
        async with self._ctx.pool.connection() as conn:
            at = await CheckpointStore(store.SCHEMA).progress(conn, TracesProjection.name)
            due = relearn_due(at, self._seen, self._previous, self._waited)
            self._previous = at
            if not due:
                self._waited = self._waited + 1 if at != self._seen else 0
                return
            async with conn.cursor() as cur:
                tenants = await facts.tenants(cur)
        for tenant_id in tenants:
            for policy in LEARNING:
                await publish_update(self._ctx, None, tenant_id, policy,
                                     self._settings.min_samples, only_if_changed=True)
            await publish_advice(self._ctx, tenant_id)
        # only once every tenant is relearned: a failure part way (an outage) is retried at the
        # next tick instead of waiting for traces that may never come
        self._seen, self._waited = at, 0


async def wire(ctx: ServiceContext, settings: RouterSettings) -> Wiring:
    states: StateCache[TenantRouting] = StateCache(1.0)
    return Wiring(rpc=RouterRpc(ctx, settings, states).registry,
                  projections=[TracesProjection(), PoliciesProjection(states)],
                  background=[Relearner(ctx, settings)])


service = ServiceDescriptor(
    name="trace_router",
    deploy_name="trace-router",
    schema=store.SCHEMA,
    rpc_prefixes=("router", "traces", "advisor", "icl"),
    projections=(TracesProjection, PoliciesProjection),
    settings=RouterSettings,
    wire=wire,
    migrations="services.trace_router.migrations",
    runner_config=RunnerConfig(batch_size=2000),
)


def build(settings: RouterSettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
