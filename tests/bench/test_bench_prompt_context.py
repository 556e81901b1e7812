"""`prompt.context` over HTTP under 50 concurrent clients: p50 and p99 as ratios to `GET /healthz`
on the same gateway in the same run (target: p50 ratio <= 3). Cold-cache latency too.

The gateway and the profile renderer run as their own processes, as deployed; the clients run in
the test process."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from habitus.auth.keys import create_key
from habitus.bus import EventPublisher
from habitus.events import CATALOG
from habitus.events.domain import CacheRebuilt, ToolRuleUpserted
from habitus.service.migrations import migrate
from services.profile_renderer.cache import ContextCache
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.processes import serve

pytestmark = pytest.mark.asyncio
CLIENTS = 50
PER_CLIENT = 40


async def seed(nc: Any, tenant: str) -> None:
    publisher = EventPublisher(nc.jetstream())
    active = [{"class": "style", "key": f"k{i}", "value": f"value {i}", "stability": 2.0 + i,
               "user_state": "auto"} for i in range(12)]
    await publisher.publish(CATALOG.new(CacheRebuilt.model_validate({
        "as_of": 1.0, "added": 12, "evicted": 0, "kept": 0, "total_size": 12,
        "active": active}), tenant_id=tenant, user_id="alice", producer="bench"))
    for i in range(5):
        await publisher.publish(CATALOG.new(ToolRuleUpserted(
            rule_id=f"r{i}", tool_name="send_email", rule=f"Rule number {i}.",
            priority="critical"), tenant_id=tenant, user_id="alice", producer="bench"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(client: httpx.AsyncClient, request: Any) -> list[float]:
    async def one_client() -> list[float]:
        out = []
        for _ in range(PER_CLIENT):
            started = time.perf_counter()
            response = await request(client)
            out.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text[:300]
        return out

    results = await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
    return [x for r in results for x in r]


async def test_prompt_context_latency_ratio(servers: ServerUrls, nc: Any, pool: Any,
                                            record: Any) -> None:
    migrate(servers.database)
    tenant = unique("bench")
    key = await create_key(pool, tenant)
    env = {**servers.env(), "HABITUS_RATE_LIMIT_PER_MINUTE": "0", "HABITUS_LOG_LEVEL": "WARNING",
           "HABITUS_EXPECTED_SERVICES": "profile_renderer"}
    with serve("profile_renderer", env), serve("gateway", env) as base:
        await seed(nc, tenant)
        headers = {"Authorization": f"Bearer {key}"}
        body = {"user_id": "alice", "tools": ["send_email", "memory_recall"]}
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits,
                                     verify=TLS) as client:
            async def ready() -> bool:
                r = await client.post("/v1/rpc/prompt.context", json=body, headers=headers)
                return r.status_code == 200 and "Rule number 4." in r.text

            deadline = time.monotonic() + 30
            while not await ready():
                assert time.monotonic() < deadline, "the profile renderer did not catch up"
                await asyncio.sleep(0.2)

            def health(c: httpx.AsyncClient) -> Any:
                return c.get("/healthz")

            def context(c: httpx.AsyncClient) -> Any:
                return c.post("/v1/rpc/prompt.context", json=body, headers=headers)

            await load(client, health)  # warm-up: connections, code paths
            healthz = await load(client, health)
            warm = await load(client, context)

            redis = Redis.from_url(servers.redis)
            cache = ContextCache(redis)
            cold = []
            for _ in range(20):
                await cache.invalidate([(tenant, "alice")])
                started = time.perf_counter()
                response = await context(client)
                cold.append(time.perf_counter() - started)
                assert response.status_code == 200
            await redis.aclose()

    p50_h, p99_h = statistics.median(healthz), percentile(healthz, 0.99)
    p50_c, p99_c = statistics.median(warm), percentile(warm, 0.99)
    record("prompt_context_latency", clients=CLIENTS, requests=len(warm),
           healthz_p50_ms=round(p50_h * 1e3, 2), healthz_p99_ms=round(p99_h * 1e3, 2),
           context_p50_ms=round(p50_c * 1e3, 2), context_p99_ms=round(p99_c * 1e3, 2),
           p50_ratio=round(p50_c / p50_h, 2), p99_ratio=round(p99_c / p99_h, 2),
           cold_single_ms=round(statistics.median(cold) * 1e3, 2), target="p50 ratio <= 3")
