"""Rebuild a projection from sequence 1.

Reset is one transaction: the projection's tables are emptied and its checkpoint returns to 0 with
a new epoch. The epoch fences a runner that is live elsewhere: it notices at its next commit or
idle check, claims again, and its consumer starts again from sequence 1. If no runner is live,
the caller rebuilds in-process until caught up.

A replay is only a rebuild if the stream still holds everything from sequence 1: the ingest
stream expires raw text, so a projection of it would come back different. That is refused
unless forced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nats.aio.client import Client
from psycopg_pool import AsyncConnectionPool

from habitus.projection.base import Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.runner import ProjectionRunner, RunnerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    projection: str
    rebuilt_here: bool
    checkpoint: int


async def reset_projection(projection: Projection, pool: AsyncConnectionPool) -> None:
    """Empty the projection's tables and tracking; checkpoint 0, new epoch (one transaction)."""
    async with pool.connection() as conn, conn.transaction():
        await CheckpointStore(projection.schema).reset(conn, projection.name,
                                                       list(projection.tables))


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
    await reset_projection(projection, pool)
    runner = ProjectionRunner(projection, nc, pool, config=config)
    if not await runner.try_lead():
        log.info("a live runner holds %s; it rebuilds itself", projection.name)
        return ReplayResult(projection.name, False, 0)
    await runner.run_until_caught_up(timeout=timeout)
    return ReplayResult(projection.name, True, runner.checkpoint)
