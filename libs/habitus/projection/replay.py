"""Rebuild a projection from sequence 1.

Reset is one transaction: the projection's tables are emptied and every partition's checkpoint
returns to 0 with a new epoch. The epoch fences a runner that is live elsewhere: it notices at its
next commit or idle check, claims again, and its consumer starts again from sequence 1. If no
runner is live, the caller rebuilds in-process until caught up, every partition at once.

A partitioned projection is rebuilt with as many partitions as it had, unless its stream holds
messages stored before the partition tokens: those only an unpartitioned consumer sees, so it
is rebuilt whole (`habitus partitions set` splits it again afterwards).

A replay is only a rebuild if the stream still holds everything from sequence 1: the ingest
stream expires raw text, so a projection of it would come back different. That is refused
unless forced.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from nats.aio.client import Client
from psycopg_pool import AsyncConnectionPool

from habitus.bus.streams import partitioned_from
from habitus.projection.base import Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.partitions import layout
from habitus.projection.runner import ProjectionRunner, RunnerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    projection: str
    rebuilt_here: bool
    checkpoint: int


async def reset_projection(projection: Projection, pool: AsyncConnectionPool,
                           count: int | None = None) -> list[int]:
    """Empty the projection's tables and tracking; every partition at 0 with a new epoch (one
    transaction); `count` partitions (default: as many as it has). Returns the partition
    counts of the new layout."""
    store = CheckpointStore(projection.schema)
    async with pool.connection() as conn, conn.transaction():
        await store.reset(conn, projection.name, list(projection.tables), count=count)
        rows = await store.layout(conn, projection.name)
    return sorted({r.partition.count for r in rows})


class IncompleteHistory(RuntimeError):
    pass


async def replay(
    projection: Projection,
    nc: Client,
    pool: AsyncConnectionPool,
    *,
    config: RunnerConfig | None = None,
    timeout: float = 600.0,
    force: bool = False,
) -> ReplayResult:
    info = await nc.jetstream().stream_info(projection.stream)
    if (info.state.first_seq or 1) > 1 and not force:
        raise IncompleteHistory(
            f"{projection.stream} starts at sequence {info.state.first_seq} (older events "
            f"expired): a replay of {projection.name} would not rebuild the same view; "
            "force it to rebuild from what is left")
    count = 1 if partitioned_from(info.config) > 1 else None
    [parts] = await reset_projection(projection, pool, count)
    runners = [ProjectionRunner(projection if part.whole else projection.clone(), nc, pool,
                                config=config, partition=part) for part in layout(parts)]
    led = [await r.try_lead() for r in runners]
    if not all(led):
        for runner, leads in zip(runners, led, strict=True):
            if leads:
                await runner.stop()
        log.info("a live runner holds %s; it rebuilds itself", projection.name)
        return ReplayResult(projection.name, False, 0)
    await asyncio.gather(*(r.run_until_caught_up(timeout=timeout) for r in runners))
    return ReplayResult(projection.name, True, min(r.checkpoint for r in runners))
