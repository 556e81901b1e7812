"""The producers service: deterministic candidate producers over the ingest stream."""

from __future__ import annotations

from typing import Any

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.producers import store
from services.producers.projection import ProducersProjection


async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
    return Wiring(projections=[ProducersProjection()])


service = ServiceDescriptor(
    name="producers",
    deploy_name="producers",
    schema=store.SCHEMA,
    projections=(ProducersProjection,),
    wire=wire,
    migrations="services.producers.migrations",
    runner_config=RunnerConfig(batch_size=2000),
)


def build() -> ServiceDescriptor:
    return service
