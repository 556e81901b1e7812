"""Gateway batch ingest throughput vs raw JetStream acked publish of the same events.

The gateway runs as its own process (as deployed); the clients and the baseline run in the test
process. Baseline: nats-py async publish with a 500-event window, waiting for every PubAck."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from habitus.auth.keys import create_key
from habitus.bus.publisher import headers_for
from habitus.events import CATALOG
from habitus.service.migrations import migrate
from tests.conftest import ServerUrls
from tests.support.factories import turn, turn_item, unique
from tests.support.http import TLS, post_all
from tests.support.processes import serve

pytestmark = pytest.mark.asyncio
N = 20_000
BATCH = 500


async def raw_acked_publish(nc: Any, tenant: str, n: int) -> float:
    js = nc.jetstream()
    events = [turn(tenant, f"u{i % 50}") for i in range(n)]
    payloads = [(CATALOG.subject(e), e.to_json(), headers_for(e)) for e in events]
    started = time.perf_counter()
    for i in range(0, n, BATCH):
        futures = [await js.publish_async(s, b, headers=h) for s, b, h in payloads[i : i + BATCH]]
        await asyncio.gather(*futures)
    return n / (time.perf_counter() - started)


async def test_gateway_ingest_ratio(servers: ServerUrls, nc: Any, pool: Any, record: Any
                                    ) -> None:
    migrate(servers.database)
    baseline = await raw_acked_publish(nc, unique("raw"), N)

    tenant = unique("gw")
    key = await create_key(pool, tenant)
    bodies = [json.dumps([turn_item(f"u{j % 50}") for j in range(BATCH)]).encode()
              for _ in range(N // BATCH)]
    env = {**servers.env(), "HABITUS_RATE_LIMIT_PER_MINUTE": "0", "HABITUS_LOG_LEVEL": "WARNING"}
    with serve("gateway", env) as base:
        url = f"{base}/v1/events"
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(timeout=60, verify=TLS) as client:
            await client.post(url, content=bodies[0][:2] + b"]", headers=headers)  # warm-up
            started = time.perf_counter()
            accepted = await post_all(client, url, bodies, headers)
            elapsed = time.perf_counter() - started
    assert accepted == N
    rate = N / elapsed
    record("gateway_ingest", events=N, batch=BATCH, clients=4,
           raw_acked_publish_per_s=round(baseline), gateway_per_s=round(rate),
           ratio=round(rate / baseline, 3), target=">= 0.3")
