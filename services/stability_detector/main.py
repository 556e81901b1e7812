"""The stability-detector service: the learning projection, its scheduler, `learning.*`.

One service, four names, all here: `stability_detector` (the process), `stability-detector`
(deploy files), schema `learning`, RPC `learning.*`.
"""

from __future__ import annotations

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.telemetry.refresh import GaugeRefresher
from services.stability_detector import metrics, store
from services.stability_detector.projection import LearningProjection
from services.stability_detector.rpc import LearningRpc
from services.stability_detector.scheduler import RebuildScheduler
from services.stability_detector.settings import LearningSettings


async def wire(ctx: ServiceContext, settings: LearningSettings) -> Wiring:
    scheduler = [RebuildScheduler(ctx, settings)] if settings.scheduler_enabled else []
    gauges = GaugeRefresher(ctx.pool, metrics.refresh_facets, name="learning.facets")
    return Wiring(rpc=LearningRpc(ctx, settings).registry,
                  projections=[LearningProjection(settings)], background=[*scheduler, gauges])


service = ServiceDescriptor(
    name="stability_detector",
    deploy_name="stability-detector",
    schema=store.SCHEMA,
    rpc_prefixes=("learning",),
    projections=(LearningProjection,),
    settings=LearningSettings,
    wire=wire,
    migrations="services.stability_detector.migrations",
    # Candidate intake is the hot path: 2,000-event batches (see docs/benchmarks.md).
    runner_config=RunnerConfig(batch_size=2000),
    # The busiest applier of all, and `learning.list_facets` is what an operator's or a
    # settings page's read waits on: its RPC in a process of its own, at the default CPU
    # priority, while the projection's process yields (habitus.runtime.priority).
    rpc_apart=True,
)


def build(settings: LearningSettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
