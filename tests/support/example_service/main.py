"""The example service: counts each user's pins per facet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.domain import FacetPinned, FacetUnpinned
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring

PINS = "example.pins"


class PinCounts(Projection):
    name = "example.pins"
    schema = "example"
    tables = (PINS,)

    async def on_pinned(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        await self._count(cur, run, 1)

    async def on_unpinned(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        await self._count(cur, run, -1)

    async def _count(self, cur: AsyncCursor[Any], run: Sequence[Delivered], delta: int) -> None:
        for d in run:
            p = d.event.payload
            await cur.execute(
                f"""INSERT INTO {PINS} (tenant_id, user_id, facet, pins) VALUES (%s, %s, %s, %s)
                    ON CONFLICT (tenant_id, user_id, facet)
                    DO UPDATE SET pins = {PINS}.pins + EXCLUDED.pins""",
                (d.event.tenant_id, d.event.user_id, f"{p.class_.value}.{p.key}", delta))

    handlers = {FacetPinned: on_pinned, FacetUnpinned: on_unpinned}


async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
    return Wiring(projections=[PinCounts()])


service = ServiceDescriptor(
    name="example_pins",
    deploy_name="example-pins",
    schema="example",
    projections=(PinCounts,),
    wire=wire,
    migrations="tests.support.example_service.migrations",
)
