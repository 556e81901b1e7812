"""The stability-detector service: the learning projection, its scheduler, `learning.*`."""

from __future__ import annotations

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.spec import ServiceSpec
from services.stability_detector.projection import LearningProjection
from services.stability_detector.rpc import LearningRpc
from services.stability_detector.scheduler import RebuildScheduler
from services.stability_detector.settings import LearningSettings, get_learning_settings


def build(settings: LearningSettings | None = None) -> ServiceSpec:
    learning = settings or get_learning_settings()
    projection = LearningProjection(learning)
    rpc = LearningRpc(learning, projection)

    async def start(ctx: ServiceContext) -> None:
        await rpc.bind(ctx)
        if learning.scheduler_enabled:
            scheduler = RebuildScheduler(ctx, learning)
            scheduler.start()
            ctx.state["scheduler"] = scheduler

    async def stop(ctx: ServiceContext) -> None:
        scheduler = ctx.state.get("scheduler")
        if scheduler is not None:
            await scheduler.stop()

    return ServiceSpec(
        name="stability_detector",
        # Candidate intake is the hot path: 2,000-event batches (see docs/benchmarks.md).
        runner_config=RunnerConfig(batch_size=2000),
        projections=lambda ctx: [projection],
        rpc=rpc.registry,
        on_start=[start],
        on_stop=[stop],
    )


def service() -> ServiceSpec:
    return build()
