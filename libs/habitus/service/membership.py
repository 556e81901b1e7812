"""One replica among its service's replicas: a lease, a share of the partitions, their runners.

Every process of a service that applies projections is a member. It renews a lease in the
service's schema (`CheckpointStore.renew`, by the database's clock) every third of
`HABITUS_LEASE_SECONDS`, and at each renewal works out its share of every projection's
partitions from the live members and the layouts (`habitus.projection.assignment`): the same
deal every replica computes. It then stops the runners of partitions it lost (each finishes
its batch and releases its lock) and starts runners for the partitions it gained, which take
over as soon as the previous holder lets go of the partition's lock.

A replica that stops says so (`leave`), and the others take its partitions at their next
renewal; one that dies without a word loses its locks at once (its Postgres session ends) and
its lease within `HABITUS_LEASE_SECONDS`, after which the others take its partitions. Every
claim is still fenced by the partition's epoch, so a replica that briefly believes it owns a
partition it lost can never commit behind its successor.

A projection without a layout gets one when a member first sees it: `HABITUS_PARTITIONS`
partitions, or one if its stream holds messages stored before the partition tokens (a
layout is never made that would miss them; `habitus partitions set` moves it on later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Sequence
from typing import Any

from nats.aio.client import Client
from psycopg_pool import AsyncConnectionPool

from habitus.bus.streams import partitioned_from
from habitus.db.leader import LockSession
from habitus.projection.assignment import Slice, assign
from habitus.projection.base import Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.leadership import lock_name
from habitus.projection.partitions import Partition
from habitus.projection.runner import ProjectionRunner, RunnerConfig

log = logging.getLogger(__name__)


def member_name(service: str, configured: str = "") -> str:
    """A replica's name: the configured one (a pod's name), else host, pid and a suffix that
    keeps a restarted process with a reused pid apart."""
    if configured:
        return configured
    return f"{service}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class Membership:
    def __init__(self, service: str, schema: str, projections: Sequence[Projection],
                 nc: Client, pool: AsyncConnectionPool, *, partitions: int,
                 lease_seconds: float, member: str = "",
                 runner_config: RunnerConfig | None = None):
        self.service = service
        self.member = member_name(service, member)
        self.lease_seconds = lease_seconds
        self.partitions = partitions
        self._projections = {p.name: p for p in projections}
        self._nc = nc
        self._pool = pool
        self._config = runner_config or RunnerConfig()
        self._store = CheckpointStore(schema)
        self._locks = LockSession(str(pool.conninfo), f"habitus-{service}-locks")
        self._runners: dict[Slice, ProjectionRunner] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._joined = False
        #: what the last renewal saw: the live members and this member's share
        self.members: list[str] = []
        self.share: list[Slice] = []

    @property
    def runners(self) -> list[ProjectionRunner]:
        return list(self._runners.values())

    @property
    def interval(self) -> float:
        return self.lease_seconds / 3

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join (the first renewal and its runners are in place when this returns, unless
        the database cannot be reached now), then renew in the background, where a join that
        failed is tried again."""
        try:
            await self._join()
        except Exception as exc:  # an outage at start: the background loop joins later
            log.warning("membership not joined yet; retrying",
                        extra={"service": self.service, "member": self.member,
                               "error": repr(exc)})
        self._task = asyncio.create_task(self._run(), name=f"membership:{self.service}")

    async def _join(self) -> None:
        await self._ensure_layouts()
        await self.renew()
        self._joined = True

    async def stop(self) -> None:
        """Stop every runner (each finishes its batch), then leave."""
        self._stopped.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        runners, self._runners = list(self._runners.values()), {}
        await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)
        await asyncio.gather(*self._stopping, return_exceptions=True)
        with contextlib.suppress(Exception):
            async with self._pool.connection() as conn:
                await self._store.leave(conn, self.member)
                await conn.commit()
        await self._locks.close()

    async def _run(self) -> None:
        while not self._stopped.is_set():
            await asyncio.sleep(self.interval)
            try:
                await (self.renew() if self._joined else self._join())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage: the runners notice on their own
                log.warning("membership renewal failed",
                            extra={"service": self.service, "member": self.member,
                                   "error": repr(exc)})

    # ------------------------------------------------------------------ the deal

    async def _ensure_layouts(self) -> None:
        """Give every projection without a layout its configured one (see the module)."""
        async with self._pool.connection() as conn:
            for projection in self._projections.values():
                count = self.partitions
                if count > 1:
                    info = await self._nc.jetstream().stream_info(projection.stream)
                    if partitioned_from(info.config) > 1:
                        count = 1
                async with conn.transaction():
                    rows = await self._store.ensure_layout(conn, projection.name, count)
                stored = sorted({r.partition.count for r in rows})
                if stored != [self.partitions]:
                    log.warning(
                        "projection runs with the partitions of its layout, not those "
                        "configured; `habitus partitions set` changes it",
                        extra={"projection": projection.name, "partitions": stored,
                               "configured": self.partitions})

    async def renew(self) -> None:
        """Renew the lease, deal the partitions, start and stop runners to match."""
        async with self._pool.connection() as conn:
            members = await self._store.renew(conn, self.member, self.lease_seconds,
                                              host=socket.gethostname(), pid=os.getpid())
            layouts = await self._store.layouts(conn)
            await conn.commit()
        if self.member not in members:  # the lease expired before the renewal landed
            members = sorted({*members, self.member})
        mine = {name: [r.partition for r in rows] for name, rows in layouts.items()
                if name in self._projections}
        share = assign(members, mine).get(self.member, [])
        self.members, self.share = members, share
        self._reconcile(set(share))

    def _reconcile(self, wanted: set[Slice]) -> None:
        for key, runner in list(self._runners.items()):
            if key not in wanted or runner.gone.is_set() or _ended(runner):
                del self._runners[key]
                self._stop_later(runner, lost=key not in wanted)
        for key in sorted(wanted - set(self._runners)):
            self._runners[key] = self._start(*key)

    def _start(self, name: str, partition: Partition) -> ProjectionRunner:
        base = self._projections[name]
        projection = base if partition.whole else base.clone()
        runner = ProjectionRunner(
            projection, self._nc, self._pool, config=self._config, partition=partition,
            owner=self.member,
            lock=self._locks.lock(lock_name(name, partition.suffix)))
        runner.start()
        log.info("partition taken", extra={"projection": name, "partition": partition.label,
                                           "member": self.member})
        return runner

    def _stop_later(self, runner: ProjectionRunner, *, lost: bool) -> None:
        """Stop a runner without holding up the renewal (a batch in flight finishes first)."""
        if lost:
            log.info("partition handed over",
                     extra={"projection": runner.projection.name,
                            "partition": runner.partition.label, "member": self.member})
        task = asyncio.create_task(runner.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)


def _ended(runner: ProjectionRunner) -> bool:
    task: Any = getattr(runner, "_task", None)
    return task is not None and task.done()
