"""Shared fixtures: real NATS, Postgres and Redis for the whole session.

Embedded servers on free ports by default; the HABITUS_*_URL variables point the suite at running
servers instead. Tests isolate themselves by unique tenant ids and schemas, never by resetting the
shared streams, so they can run against a server other things also use.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import settings as hypothesis_settings

from habitus.bus import connect, ensure_streams
from habitus.config import Settings
from habitus.crypto.setup import keyring_from
from habitus.db.pool import open_pool
from habitus.events import install_keyring
from habitus.runtime.embedded import EmbeddedNats, EmbeddedPostgres, EmbeddedRedis, EmbeddedServer
from habitus.subjects import EVENT_ROOT, INGEST_ROOT

# Hypothesis's per-example deadline is a timing assertion: on two cores shared with a test
# worker and embedded servers an ordinary example can take half a second. The properties are
# what the suite checks; speed is measured in tests/bench.
hypothesis_settings.register_profile("habitus", deadline=None)
hypothesis_settings.load_profile("habitus")

# The producers started in a test's own process (and the processes that inherit its
# environment) read statements in a thread: a reader process of their own costs every start a
# fresh interpreter and two seconds of loading, about a fifth of those tests' time. The same
# cases run against both placements in tests/unit/test_read_ahead.py, and a `habitus up` with
# the default (tests/integration/test_up_runtime.py, which clears HABITUS_*) checks the
# process, its priority and its end with a killed run.
os.environ.setdefault("HABITUS_PRODUCERS_READER_PROCESSES", "0")

#: The modules of a worker share its streams, so a runner catching up on earlier modules' events
#: is real pipeline lag, and the gateway would push a test's tenant back for it. Backpressure is
#: off unless a test turns it on (tests/integration/test_gateway_backpressure.py does).
NO_BACKPRESSURE: dict[str, object] = {"backpressure_lag_seconds": 0}


@dataclass(frozen=True)
class ServerUrls:
    nats: str
    database: str
    redis: str
    data_dir: Path

    def settings(self, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "nats_url": self.nats,
            "database_url": self.database,
            "redis_url": self.redis,
            "data_dir": self.data_dir,
            **NO_BACKPRESSURE,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    def env(self) -> dict[str, str]:
        return {
            "HABITUS_NATS_URL": self.nats,
            "HABITUS_DATABASE_URL": self.database,
            "HABITUS_REDIS_URL": self.redis,
            "HABITUS_DATA_DIR": str(self.data_dir),
            "HABITUS_BACKPRESSURE_LAG_SECONDS": "0",
        }


@pytest.fixture(scope="session")
def servers() -> Iterator[ServerUrls]:
    root = Path(tempfile.mkdtemp(prefix="habitus-test-"))
    started: list[EmbeddedServer] = []

    def pick(env: str, server: EmbeddedServer) -> str:
        if os.environ.get(env):
            return os.environ[env]
        url = server.start()
        started.append(server)
        return url

    try:
        urls = ServerUrls(
            nats=pick("HABITUS_NATS_URL", EmbeddedNats(root)),
            database=pick(
                "HABITUS_DATABASE_URL",
                EmbeddedPostgres(root, extra_options={"fsync": "off",
                                                      "synchronous_commit": "off"}),
            ),
            redis=pick("HABITUS_REDIS_URL", EmbeddedRedis(root)),
            data_dir=root,
        )
        # One key store for the worker: its in-process services, the services and commands it
        # starts as processes (they inherit the variable) and its own event readers seal and
        # open users' payloads alike (a `habitus up` or demo it starts names its own).
        keystore = root.with_name(f"{root.name}-keys")
        os.environ["HABITUS_KEYSTORE_DIR"] = str(keystore)
        install_keyring(keyring_from(urls.settings()))
        yield urls
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(root.with_name(f"{root.name}-keys"), ignore_errors=True)


@pytest.fixture(scope="session")
def settings(servers: ServerUrls) -> Settings:
    return servers.settings()


#: a subject of each shared stream that no projection reads and no erasure purges
SENTINELS = (f"{INGEST_ROOT}.SuiteSentinel.suite.sentinel",
             f"{EVENT_ROOT}.SuiteSentinel.suite.sentinel")


@asynccontextmanager
async def bus_client(servers: ServerUrls) -> AsyncIterator[Any]:
    """A client of `servers`' NATS with the streams in place, drained at the end."""
    client = await connect(servers.nats, "tests")
    js = client.jetstream()
    await ensure_streams(js, servers.settings())
    # Sequence 1 of a fresh stream is a message nobody erases. An erasure purges the user's
    # messages; when they were a worker's first, the stream then started past sequence 1 and
    # every later `replay` on that worker was refused as "older events expired".
    for subject in SENTINELS:
        stream = await js.find_stream_name_by_subject(subject)
        if (await js.stream_info(stream)).state.last_seq == 0:
            await js.publish(subject, b"{}")
    try:
        yield client
    finally:
        await client.drain()


@pytest_asyncio.fixture(scope="session")
async def nc(servers: ServerUrls) -> AsyncIterator[object]:
    async with bus_client(servers) as client:
        yield client


@asynccontextmanager
async def database_pool(servers: ServerUrls) -> AsyncIterator[Any]:
    """A connection pool on `servers`' database, closed at the end."""
    async with await open_pool(servers.database, min_size=1, max_size=10, name="tests") as p:
        yield p


@pytest_asyncio.fixture(scope="session")
async def pool(servers: ServerUrls) -> AsyncIterator[object]:
    async with database_pool(servers) as p:
        yield p
