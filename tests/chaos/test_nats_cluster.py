"""A three-node NATS cluster with R3 streams: SIGKILL the node leading the ingest stream while
events are published and applied, restart it; every accepted event is applied exactly once.

The cluster is three nats-server processes from the same wheel (`EmbeddedNatsCluster`), routed
to each other; the streams are Habitus's own (`ensure_streams` with `stream_replicas=3`). A
publisher sends 4,000 turns in batches, resending any whose PubAck did not come back (the event
id deduplicates, as every producer of Habitus relies on), while a projection runner applies them
to a TallyProjection, which counts every apply: an event applied twice shows as a wrong count or
a duplicate `seen` row, a lost one as a missing row.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from habitus.bus import INGEST, EventPublisher, PublishResult, connect, ensure_streams
from habitus.config import Settings
from habitus.events import Event
from habitus.projection import ProjectionRunner
from habitus.runtime.embedded import EmbeddedNatsCluster
from habitus.runtime.state import InstanceLock, Unavailable, live_urls, write_runtime
from habitus.runtime.up import Up
from tests.conftest import ServerUrls
from tests.integration.runner_support import FAST, eventually
from tests.support.factories import turn, unique
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

TOTAL = 4_000
BATCH = 200


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedNatsCluster]:
    with EmbeddedNatsCluster(tmp_path / "cluster") as nodes:
        yield nodes


async def publish_until_stored(publisher: EventPublisher, events: list[Event[Any]]) -> None:
    """Every event stored once: a failed or unconfirmed publish is sent again (same id)."""
    waiting = list(events)
    for _ in range(60):
        results = await publisher.publish_many(waiting)
        waiting = [e for e, r in zip(waiting, results, strict=True)
                   if not isinstance(r, PublishResult)]
        if not waiting:
            return
        await asyncio.sleep(0.5)  # a new stream leader is being elected
    raise AssertionError(f"{len(waiting)} events never stored")


async def stream_leader(nc: Any) -> str:
    info = await nc.jetstream().stream_info(INGEST)
    assert info.cluster is not None and info.cluster.leader
    return str(info.cluster.leader)


async def test_killing_the_stream_leader_loses_nothing_and_applies_nothing_twice(
        cluster: EmbeddedNatsCluster, servers: ServerUrls, pool: Any) -> None:
    settings = servers.settings(nats_url=cluster.url, stream_replicas=3)
    nc = await connect(cluster.url, "tests-cluster")
    try:
        await ensure_streams(nc.jetstream(), settings)
        info = await nc.jetstream().stream_info(INGEST)
        assert info.config.num_replicas == 3 and info.cluster is not None
        assert len(info.cluster.replicas or []) == 2  # the leader and two followers

        tenant = unique("cluster")
        projection = TallyProjection(unique("tally"), tenant)
        async with pool.connection() as conn:
            for stmt in projection.ddl():
                await conn.execute(stmt)
            await conn.commit()
        events = [turn(tenant, f"u{i % 25}", f"message {i}") for i in range(TOTAL)]

        runner_nc = await connect(cluster.url, "tests-cluster-runner")
        runner = ProjectionRunner(projection, runner_nc, pool, config=FAST)
        running = runner.start()
        publisher = EventPublisher(nc.jetstream())
        killed: int | None = None
        for start in range(0, TOTAL, BATCH):
            await publish_until_stored(publisher, events[start:start + BATCH])
            if killed is None and start >= TOTAL // 4:
                leader = await stream_leader(nc)
                killed = next(i for i, node in enumerate(cluster.nodes)
                              if node.cluster and node.cluster.server_name == leader)
                cluster.kill(killed)
        assert killed is not None
        cluster.restart(killed)

        expected = fold(events)

        async def applied_all() -> bool:
            return await read_counts(pool, projection.schema) == expected

        await eventually(applied_all, timeout=90)
        seen = await read_seen(pool, projection.schema)
        assert sorted(e for e, _, _ in seen) == sorted(e.event_id for e in events)
        stored = await nc.jetstream().stream_info(
            INGEST, subjects_filter=f"habitus.v1.ingest.turn.{tenant}.>")
        assert sum((stored.state.subjects or {}).values()) == TOTAL  # no copy stored twice
        assert await stream_leader(nc)  # the restarted node rejoined a working cluster
        await runner.stop()
        await running
        await runner_nc.drain()
    finally:
        await nc.drain()


async def test_a_cluster_url_reaches_the_nodes_still_up(cluster: EmbeddedNatsCluster,
                                                        tmp_path: Path) -> None:
    """The CLI's probe of a live `habitus up` and every client take the comma-separated URL,
    and one node down is no outage for them."""
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    write_runtime(data_dir, {"pid": os.getpid(), "children": {}, "nats_url": cluster.url})
    lock = InstanceLock(data_dir)
    lock.acquire()
    try:
        cluster.kill(0)
        assert live_urls(data_dir, ["nats_url"])["nats_url"] == cluster.url
        nc = await connect(cluster.url, "tests-cluster-url")
        assert nc.connected_url is not None
        assert nc.connected_url.port != cluster.nodes[0].port
        await nc.close()
        for node in cluster.nodes[1:]:
            node.kill()
        with pytest.raises(Unavailable, match="does not answer"):
            live_urls(data_dir, ["nats_url"])
    finally:
        lock.release()


def test_up_with_a_local_cluster_replicates_every_stream_three_times(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, nats_url="")
    assert Up(settings, nats_cluster=True).settings.stream_replicas == 3
    assert Up(settings).settings.stream_replicas == 1
    configured = Settings(data_dir=tmp_path, nats_url="nats://127.0.0.1:4222")
    assert Up(configured, nats_cluster=True).settings.stream_replicas == 1  # not ours to start
