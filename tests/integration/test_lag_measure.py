"""`habitus lag`'s measurement over an open connection (what the demo's wait and the load run
hold) says what it says over a connection string."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from habitus.demo.progress import LagProbe, projection_lag
from habitus.ops.lag import measure
from habitus.service.migrations import migrate
from tests.conftest import ServerUrls


@pytest.mark.asyncio
async def test_an_open_connection_measures_what_a_connection_string_does(
        servers: ServerUrls, nc: Any) -> None:
    migrate(servers.database)
    by_string = await measure(nc, servers.database)
    async with await psycopg.AsyncConnection.connect(servers.database, autocommit=True) as conn:
        held = await measure(nc, conn)
        again = await measure(nc, conn)
        assert not conn.closed  # the caller's, left open
    assert by_string and [lag.projection for lag in held] == [lag.projection
                                                                for lag in by_string]
    assert [(lag.checkpoint, lag.stream_seq) for lag in held] == [
        (lag.checkpoint, lag.stream_seq) for lag in again]


def test_the_demos_probe_measures_again_over_the_same_connections(servers: ServerUrls
                                                                   ) -> None:
    migrate(servers.database)
    probe = LagProbe(servers.nats, servers.database)
    try:
        first = probe.measure()
        backend = probe._conn.info.backend_pid if probe._conn is not None else None
        second = probe.measure()
        assert probe._conn is not None and probe._conn.info.backend_pid == backend
    finally:
        probe.close()
    assert probe._conn is not None and probe._conn.closed
    assert [lag.projection for lag in first] == [lag.projection for lag in second] == [
        lag.projection for lag in projection_lag(servers.nats, servers.database)]
