"""The projection contract, partitioned: every projection of every service, split four ways
over two replicas, one of them SIGKILLed mid-batch, builds exactly what one runner builds.

For each projection (the same cases as tests/contract/test_contract.py, erasures included):

1. its events for two tenants of three users each are published, and one runner applies
   them whole: the reference rows (per tenant, every column) and the consequences on the stream;
2. the rows are erased and the projection laid out again in four partitions from sequence 1,
   its consequences to be published again with the same ids (the stream must drop them);
3. two replicas share the four partitions: one in this process, one a process of its own
   (`tests.contract.replicas`) that hangs inside a batch after two and is SIGKILLed there;
   the survivor takes its partitions once its lease lapses and finishes;
4. the rows equal the reference's, the stream holds each consequence once (the same ids), no
   dead letter was written, and every partition reached the end of its share.

Its own file (not a fifth test of each `ProjectionContract`): the cases wait out a lease each,
and the suite's workers take files whole, so this file runs beside the other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from habitus.events import Event
from habitus.projection import Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.consumer import durable_name
from habitus.projection.partitions import layout
from habitus.service.membership import Membership
from habitus.service.partitions import last_seq_on
from tests.conftest import ServerUrls
from tests.contract import examples
from tests.contract.harness import (
    FAST,
    Scoped,
    emitted_on_stream,
    erase_tenant,
    instantiate,
    messages,
    publish,
    scope,
    snapshot,
)
from tests.contract.replicas import Zygote
from tests.contract.test_contract import CASES, _class_name
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio

TENANTS = 2
USERS = ("u1", "u2", "u3")
PARTITIONS = 4
LEASE = 0.6


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


async def caught_up(pool: Any, nc: Any, projection: Projection) -> bool:
    """Every partition of the layout at or past the last event on its subjects."""
    async with pool.connection() as conn:
        rows = await CheckpointStore(projection.schema).layout(conn, projection.name)
    if [r.partition for r in rows] != layout(PARTITIONS):
        return False
    js = nc.jetstream()
    for row in rows:
        top = await last_seq_on(js, projection.stream,
                                projection.partition_filters(row.partition))
        if row.last_seq < top:
            return False
    return True


async def dead_letters(nc: Any, projection: Projection) -> list[Any]:
    durables = [durable_name(projection, p) for p in layout(PARTITIONS)]
    return await messages(nc, "HABITUS_DLQ", [f"habitus.v1.dlq.{d}.>" for d in durables])


class PartitionedContract:
    projection_class: ClassVar[type[Projection]]

    def events(self, tenant: str, user: str) -> list[Event[Any]]:
        return examples.sequence(self.projection_class.consumes, tenant, user, 2)

    async def test_four_partitions_on_two_replicas_one_killed_equal_one_runner(
            self, nc: Any, pool: Any, migrated: None, servers: ServerUrls, zygote: Zygote,
            tmp_path: Path) -> None:
        cls = self.projection_class
        tenants = [unique("cp") for _ in range(TENANTS)]
        await publish(nc, [e for t in tenants for u in USERS for e in self.events(t, u)])

        reference = Scoped.of(instantiate(cls), *tenants)
        await reference.run(nc, pool)
        want = {t: await snapshot(pool, reference.projection, t) for t in tenants}
        on_stream = {t: await emitted_on_stream(nc, reference.projection, t) for t in tenants}

        # the same projection again from nothing, split four ways (an instance without the
        # reference's recording: each partition applies on a clone of its own)
        for t in tenants:
            await erase_tenant(pool, reference.projection, t, USERS)
        async with pool.connection() as conn, conn.transaction():
            await CheckpointStore(cls.schema).reset(conn, reference.name, count=PARTITIONS,
                                                    republish=True)
        split = scope(instantiate(cls), tenants)
        split.name = reference.name  # type: ignore[misc]

        marker = tmp_path / "stalled"
        pid = zygote.spawn(projection=cls.name, name=reference.name, tenants=tenants,
                           partitions=PARTITIONS, lease=LEASE, member="replica-b",
                           stall_after=2, batch_size=2, marker=str(marker),
                           log=str(tmp_path / "replica-b.log"),
                           nats_url=servers.nats, database_url=servers.database,
                           keystore_dir=os.environ["HABITUS_KEYSTORE_DIR"])
        here = Membership("contract", cls.schema, [split], nc, pool,
                          partitions=PARTITIONS, lease_seconds=LEASE, member="replica-a",
                          runner_config=FAST)
        try:
            await _until(lambda: marker.exists(), 30, "the other replica to stall mid-batch",
                         tmp_path)
            await here.start()
            os.kill(pid, signal.SIGKILL)
            await _until_async(lambda: caught_up(pool, nc, reference.projection), 60,
                               "the survivor to finish every partition", tmp_path)
            async with pool.connection() as conn:
                rows = await CheckpointStore(cls.schema).layout(conn, reference.name)
            assert {r.owner for r in rows} == {"replica-a"}
        finally:
            await here.stop()
            _kill(pid)

        for t in tenants:
            assert await snapshot(pool, reference.projection, t) == want[t], t
            assert await emitted_on_stream(nc, reference.projection, t) == on_stream[t], t
        assert await dead_letters(nc, reference.projection) == []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _until(check: Any, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{_logs(logs)}")
        await asyncio.sleep(0.02)


async def _until_async(check: Any, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{_logs(logs)}")
        await asyncio.sleep(0.05)


def _logs(where: Path) -> str:
    return "\n".join(f"{p.name}: {p.read_text()[-3000:]}" for p in where.glob("*.log"))


for _descriptor, _projection in CASES:
    _name = _class_name(_projection)
    globals()[_name] = type(_name, (PartitionedContract,), {
        "projection_class": _projection, "__module__": __name__,
        "__doc__": f"The partitioned contract, for {_projection.name} of {_descriptor.name}."})
