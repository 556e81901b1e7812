"""The producers service: deterministic candidate producers over the ingest stream."""

from __future__ import annotations

from habitus.projection import RunnerConfig
from habitus.service.spec import ServiceSpec
from services.producers.projection import ProducersProjection


def build() -> ServiceSpec:
    projection = ProducersProjection()
    return ServiceSpec(name="producers", projections=lambda ctx: [projection],
                       runner_config=RunnerConfig(batch_size=2000))


def service() -> ServiceSpec:
    return build()
