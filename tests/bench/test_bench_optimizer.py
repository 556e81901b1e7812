"""Optimizer benchmark (issue 27): estimating a configuration over 100,000 recorded traces
against paging through the same traces with `traces.export`.

The gateway, the trace router and the optimizer run as processes of their own on the embedded
servers. 100,000 traces (tests/bench/trace_corpus.py: five models drawn uniformly, so the log is
an exploration log) are published straight to HABITUS_INGEST, each with its decision id, and
their 100,000 `RouteDecided` (propensity 1/5 over the five models) to HABITUS_EVENTS, as the
gateway and the router would have; both services fold them. Then, in the same run:

- the baseline: `traces.export` over HTTP, page by page (500 a page) through all 100,000;
- `optimize.evaluate` over HTTP: one configuration against the current one (it reads the log
  once, summarises it, and estimates both);
- a 12-trial random run over the model for two query classes and the policy: its time per
  trial, from the run's start to its end over the trials (the log read once for the run).

Target (issue 27): one trial's evaluation <= 0.2 x the export's time. `evaluate_ratio` holds
the log's one read as well; `per_trial_ratio` is the figure the target is about.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import EventPublisher
from habitus.events import CATALOG
from habitus.events.domain import RouteDecided
from habitus.events.ingest import TraceCompleted
from habitus.routing.context import classify
from habitus.service.migrations import migrate
from tests.bench import trace_corpus
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.processes import serve

pytestmark = pytest.mark.asyncio
TRACES = 100_000
PAGE = 500
TRIALS = 12


@pytest_asyncio.fixture(scope="module")
async def base(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    env = {**servers.env(), "HABITUS_RATE_LIMIT_PER_MINUTE": "0",
           "HABITUS_LOG_LEVEL": "WARNING",
           "HABITUS_EXPECTED_SERVICES": "optimizer,trace_router",
           "HABITUS_RPC_TIMEOUT_SECONDS": "60", "HABITUS_OPTIMIZE_POLL_SECONDS": "0.2"}
    with serve("trace_router", env), serve("optimizer", env), serve("gateway", env) as url:
        yield url


async def publish(nc: Any, tenant: str) -> None:
    publisher = EventPublisher(nc.jetstream())
    traces: list[Any] = []
    decisions: list[Any] = []
    for d in trace_corpus.traces(TRACES):
        decision = f"dec-{d['trace_id']}"
        payload = {k: v for k, v in d.items() if k != "user_id"}
        payload["decision_id"] = decision
        traces.append(CATALOG.new(TraceCompleted.model_validate(payload), tenant_id=tenant,
                                  user_id=d["user_id"], producer="bench"))
        decisions.append(CATALOG.new(RouteDecided(
            query_id=decision, model=d["model"], policy="grpo", reason="uniform",
            query_class=classify(d["query"]), propensity=1 / len(trace_corpus.MODELS),
            offered=list(trace_corpus.MODELS), urgency=0.5, configuration=0),
            tenant_id=tenant, user_id=d["user_id"], producer="bench"))
        for chunk in (traces, decisions):
            if len(chunk) == 2000:
                results = await publisher.publish_many(chunk)
                assert not [r for r in results if isinstance(r, Exception)]
                chunk.clear()
    for chunk in (traces, decisions):
        if chunk:
            results = await publisher.publish_many(chunk)
            assert not [r for r in results if isinstance(r, Exception)]


async def rpc(client: httpx.AsyncClient, headers: dict[str, str], method: str,
              **params: Any) -> Any:
    response = await client.post(f"/v1/rpc/{method}", json=params, headers=headers)
    assert response.status_code == 200, response.text[:500]
    return response.json()["result"]


async def test_a_trial_costs_a_fraction_of_paging_through_the_traces(
        base: str, servers: ServerUrls, nc: Any, pool: Any, record: Any) -> None:
    tenant = unique("bench")
    headers = {"Authorization": f"Bearer {await create_key(pool, tenant)}"}
    await publish(nc, tenant)
    async with httpx.AsyncClient(base_url=base, timeout=300, verify=TLS) as client:
        deadline = time.monotonic() + 1800
        while True:
            summary = await rpc(client, headers, "traces.summary")
            found = await rpc(client, headers, "optimize.evaluate", params={})
            if summary["traces"] == TRACES and found["current"]["support"] >= TRACES // 5 - 500:
                break
            assert time.monotonic() < deadline, (summary["traces"], found["current"])
            await asyncio.sleep(2)

        started = time.perf_counter()
        after: str | None = None
        exported = 0
        while True:
            page = await rpc(client, headers, "traces.export", limit=PAGE,
                             **({"after": after} if after else {}))
            exported += page["count"]
            after = page["next"]
            if after is None:
                break
        export_seconds = time.perf_counter() - started
        assert exported == TRACES

        params = {"routing.model_for.code": "deepseek-coder-v2:16b",
                  "routing.model_for.general": "gpt-4o"}
        started = time.perf_counter()
        evaluated = await rpc(client, headers, "optimize.evaluate", params=params)
        evaluate_seconds = time.perf_counter() - started
        assert evaluated["estimate"]["refused"] is None, evaluated

        space = {"search": [
            {"name": "routing.model_for.code", "values": list(trace_corpus.MODELS)},
            {"name": "routing.model_for.long", "values": list(trace_corpus.MODELS)},
            {"name": "routing.policy", "values": ["heuristic", "learned", "sft"]}]}
        run = await rpc(client, headers, "optimize.run", space=space, max_trials=TRIALS,
                        patience=TRIALS, seed=1)
        status = await rpc(client, headers, "optimize.status", run_id=run["run_id"])
        for _ in range(3000):
            if status["status"] != "running":
                break
            await asyncio.sleep(0.2)
            status = await rpc(client, headers, "optimize.status", run_id=run["run_id"])
        assert status["status"] == "completed" and status["trials"] == TRIALS, status
        run_seconds = status["ended_at"] - status["started_at"]

    per_trial = run_seconds / TRIALS
    record("optimizer_counterfactual", traces=TRACES,
           export_seconds=round(export_seconds, 2),
           evaluate_seconds=round(evaluate_seconds, 3),
           run_seconds=round(run_seconds, 2), trials=TRIALS,
           per_trial_seconds=round(per_trial, 3),
           evaluate_ratio=round(evaluate_seconds / export_seconds, 4),
           per_trial_ratio=round(per_trial / export_seconds, 4))
    assert per_trial / export_seconds <= 0.2
