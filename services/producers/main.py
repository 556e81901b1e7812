"""The producers service: deterministic candidate producers over the ingest stream."""

from __future__ import annotations

from habitus.service.spec import ServiceSpec
from services.producers.projection import ProducersProjection


def build() -> ServiceSpec:
    projection = ProducersProjection()
    return ServiceSpec(name="producers", projections=lambda ctx: [projection])


def service() -> ServiceSpec:
    return build()
