"""The `habitus` command as an operator runs it (a real process against real servers)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from habitus.auth.keys import hash_key, lookup
from habitus.bus import connect, ensure_streams
from habitus.runtime.embedded import EmbeddedNats
from tests.conftest import ServerUrls
from tests.integration.runner_support import new_tally, publish, run_to_end
from tests.support.factories import turn, unique
from tests.support.tally import fold, read_counts, read_seen

REPO = Path(__file__).resolve().parents[2]


def habitus(servers: ServerUrls, *args: str, extra: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **servers.env(), **(extra or {})}
    return subprocess.run([sys.executable, "-m", "habitus.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_migrate_is_idempotent(servers: ServerUrls) -> None:
    first = habitus(servers, "migrate")
    second = habitus(servers, "migrate")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert "gateway:" in second.stdout
    assert "-> 0001" in second.stdout
    assert "0001 -> 0001" in second.stdout  # nothing left to apply the second time


@pytest.mark.asyncio
async def test_keys_create_prints_the_key_once_and_stores_only_its_hash(servers: ServerUrls,
                                                                        pool: Any) -> None:
    habitus(servers, "migrate")
    tenant = unique("tn")
    created = habitus(servers, "keys", "create", "--tenant", tenant, "--label", "ci")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("hab_") and len(key) > 40

    principal = await lookup(pool, key)
    assert principal is not None and principal.tenant_id == tenant
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM gateway.api_keys WHERE key_hash = %s "
                                 "OR key_prefix = %s", (hash_key(key), key))
        row = await cur.fetchone()
        leaked = await conn.execute("SELECT count(*) FROM gateway.api_keys WHERE "
                                    "key_hash = %s OR label = %s", (key, key))
        leaked_row = await leaked.fetchone()
    assert row is not None and row[0] == 1
    assert leaked_row is not None and leaked_row[0] == 0

    listed = habitus(servers, "keys", "list", "--tenant", tenant)
    assert key[:12] in listed.stdout and key not in listed.stdout
    assert habitus(servers, "keys", "revoke", key[:12]).returncode == 0
    assert await lookup(pool, key) is None

    bad = habitus(servers, "keys", "create", "--tenant", "not valid")
    assert bad.returncode == 2
    assert "tenant" in bad.stdout + bad.stderr


@pytest.mark.asyncio
async def test_replay_command_rebuilds_an_identical_projection(servers: ServerUrls, pool: Any,
                                                               tmp_path: Path) -> None:
    """On a NATS of its own: a replay refuses a stream whose first messages are gone, and in
    the worker's shared one an earlier module's erasure may have removed them."""
    bus = EmbeddedNats(tmp_path)
    own = dataclasses.replace(servers, nats=bus.start())
    try:
        nc = await connect(own.nats, "tests-replay")
        try:
            await ensure_streams(nc.jetstream(), own.settings())
            projection, tenant = await new_tally(pool)
            events = [turn(tenant, f"u{i % 3}") for i in range(40)]
            await publish(nc, events)
            await run_to_end(projection, nc, pool)
        finally:
            await nc.drain()
        before = (await read_counts(pool, projection.schema),
                  await read_seen(pool, projection.schema))

        result = habitus(own, "replay", "tests.support.tally:from_env",
                         extra={"TALLY_SCHEMA": projection.schema, "TALLY_TENANT": tenant})
    finally:
        bus.stop()

    assert result.returncode == 0, result.stdout + result.stderr
    assert "rebuilt up to stream sequence" in result.stdout
    after = await read_counts(pool, projection.schema), await read_seen(pool, projection.schema)
    assert after == before
    assert after[0] == fold(events)


def test_unknown_projection_and_service_are_clear_errors(servers: ServerUrls) -> None:
    replay = habitus(servers, "replay", "no_such_projection")
    assert replay.returncode == 2
    assert "Traceback" not in replay.stderr
    assert "unknown projection 'no_such_projection'" in replay.stderr + replay.stdout
    serve = habitus(servers, "serve", "no_such_service")
    assert serve.returncode == 2
    assert "unknown service" in serve.stdout


@pytest.mark.asyncio
async def test_revoking_by_a_shared_prefix_is_refused(servers: ServerUrls, pool: Any) -> None:
    from habitus.auth.keys import store_key

    habitus(servers, "migrate")
    shared = "shared-" + unique("p")[:5]
    await store_key(pool, unique("tn"), shared + "-aaaaaaaa")
    await store_key(pool, unique("tn"), shared + "-bbbbbbbb")
    refused = habitus(servers, "keys", "revoke", shared[:12])
    assert refused.returncode == 2
    assert "give the whole key" in refused.stdout
    assert await lookup(pool, shared + "-aaaaaaaa") is not None
    assert habitus(servers, "keys", "revoke", shared + "-aaaaaaaa").returncode == 0
    assert await lookup(pool, shared + "-aaaaaaaa") is None
    assert await lookup(pool, shared + "-bbbbbbbb") is not None


def test_erase_without_a_running_gateway_says_so(servers: ServerUrls) -> None:
    done = habitus(servers, "erase", "--tenant", unique("t"), "--user", "u1",
                   extra={"HABITUS_RPC_TIMEOUT_SECONDS": "2"})
    assert done.returncode == 1
    assert "no gateway answered admin.erase_user" in done.stdout
