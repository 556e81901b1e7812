"""The producers service: deterministic candidate producers over the ingest stream."""

from __future__ import annotations

import asyncio
from typing import Any

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.producers import store
from services.producers.projection import ProducersProjection
from services.producers.reading.reader import StatementReader


async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
    """The reader's model, bank and gazetteer are loaded before the first turn is read (about
    two seconds at start), so the first user's turns are not the ones that wait for them."""
    reader = StatementReader()
    await asyncio.to_thread(reader.warm)
    return Wiring(projections=[ProducersProjection(reader)])


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
