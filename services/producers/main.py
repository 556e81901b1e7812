"""The producers service: deterministic candidate producers over the ingest stream."""

from __future__ import annotations

import asyncio

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.producers import store
from services.producers.projection import ProducersProjection
from services.producers.reading.ahead import in_thread
from services.producers.reading.apart import ReaderProcesses, in_processes
from services.producers.reading.reader import StatementReader


class ProducersSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_PRODUCERS_", extra="ignore")

    reader_processes: int = Field(default=1, ge=0, le=16, description=(
        "processes of its own the producers read statements in (each loads the reader: "
        "about 200 MB), beside the one applying the projection, so that reading a batch runs "
        "on another core while the batch before it is applied; 0: read in a worker thread of "
        "the service's process"))


async def wire(ctx: ServiceContext, settings: ProducersSettings) -> Wiring:
    """The reader's model, bank and gazetteer are loaded before the first turn is read (about
    two seconds at start), so the first user's turns are not the ones that wait for them: in
    the service's process before it starts, or in the reader's processes as they start."""
    if settings.reader_processes > 0:
        processes = ReaderProcesses(settings.reader_processes)
        await processes.warm()
        return Wiring(projections=[ProducersProjection(in_processes(processes))],
                      background=[processes])
    reader = StatementReader()
    await asyncio.to_thread(reader.warm)
    return Wiring(projections=[ProducersProjection(in_thread(reader))])


service = ServiceDescriptor(
    name="producers",
    deploy_name="producers",
    schema=store.SCHEMA,
    projections=(ProducersProjection,),
    settings=ProducersSettings,
    wire=wire,
    migrations="services.producers.migrations",
    runner_config=RunnerConfig(batch_size=2000),
)


def build() -> ServiceDescriptor:
    return service
