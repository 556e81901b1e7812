"""The trace router end to end over HTTP: traces and feedback for two models go in through the
gateway; the analyzer's figures match them, and the learned, bandit and GRPO policies route
code queries to the model that did better, with `RoutingPolicyUpdated` published.

Every installed service runs in-process on the embedded servers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import EVENTS
from habitus.db.migrate import migrate
from habitus.projection.registry import resolve
from habitus.projection.replay import replay
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from services.trace_router.settings import RouterSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import every_service

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
T0 = 1_764_000_000.0
CODE = "import os; def main(): pass"
MODELS = ["qwen3:8b", "codestral"]


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    presets = {"stability_detector": LearningSettings(scheduler_enabled=False),
               "tool_memory": ToolMemorySettings(semantic_recall=False),
               "trace_router": RouterSettings(min_samples=3, relearn_seconds=0.5)}
    async with every_service(servers.settings(), presets) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


class Tenant:
    def __init__(self, base: str, key: str, name: str):
        self.base, self.key, self.name = base, key, name

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as client:
            return await client.post(path, json=body,
                                      headers={"Authorization": f"Bearer {self.key}"})

    async def rpc(self, method: str, **params: Any) -> Any:
        response = await self.post(f"/v1/rpc/{method}", params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    async def ingest(self, items: list[dict[str, Any]]) -> None:
        response = await self.post("/v1/events", items)
        assert response.status_code == 200, response.text


def trace(user: str, n: int, model: str, ok: bool, query: str = CODE) -> dict[str, Any]:
    t = T0 + n * 10
    return {"type": "TraceCompleted", "user_id": user, "payload": {
        "trace_id": f"tr-{n}", "query": query, "agent": "coder", "model": model,
        "engine": "ollama", "result": "done" if ok else "it broke",
        "outcome": "success" if ok else "failure", "feedback": 0.9 if ok else 0.3,
        "started_at": t, "ended_at": t + 3, "total_tokens": 300,
        "total_latency_seconds": 3.0, "cost_usd": 0.001,
        "steps": [{"step_type": "llm", "timestamp": t, "duration_seconds": 2.0,
                   "input": {"prompt_tokens": 200}, "output": {"completion_tokens": 100}},
                  {"step_type": "tool", "timestamp": t + 2, "duration_seconds": 0.5,
                   "input": {"tool": "search"}, "output": {"success": ok}},
                  {"step_type": "tool", "timestamp": t + 2.5, "duration_seconds": 0.3,
                   "input": {"tool": "python"}, "output": {"success": ok}}]}}


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture(scope="module")
async def taught(stack: str, pool: Any) -> Tenant:
    """12 code traces on codestral (success, 0.9) and 12 on qwen3:8b (failure, 0.3),
    interleaved; and a score for one more trace sent before the trace itself."""
    name = unique("acme")
    tenant = Tenant(stack, await create_key(pool, name), name)
    await tenant.ingest([{"type": "FeedbackGiven", "user_id": "dana",
                          "payload": {"trace_id": "tr-99", "score": 0.95,
                                      "outcome": "success"}}])
    await tenant.ingest([trace("dana" if n % 3 else "lee", n, MODELS[n % 2 == 0], n % 2 == 0)
                         for n in range(24)])
    late = trace("dana", 99, "codestral", True, "Summarise the release notes.")
    late["payload"].update(outcome=None, feedback=None)
    await tenant.ingest([late])

    async def counted() -> bool:
        return bool((await tenant.rpc("traces.summary"))["traces"] == 25)

    await until(counted)
    return tenant


async def test_the_analyzer_matches_the_traces(taught: Tenant) -> None:
    routes = {r["model"]: r for r in (await taught.rpc("traces.route_stats"))["routes"]}
    assert routes["codestral"]["count"] == 13 and routes["qwen3:8b"]["count"] == 12
    assert routes["qwen3:8b"]["success_rate"] == 0.0
    assert routes["qwen3:8b"]["avg_feedback"] == pytest.approx(0.3)
    assert routes["codestral"]["success_rate"] == 1.0
    assert routes["codestral"]["avg_feedback"] == pytest.approx((12 * 0.9 + 0.95) / 13)
    tools = {t["tool_name"]: t for t in (await taught.rpc("traces.tool_stats"))["tools"]}
    assert tools["search"]["call_count"] == 25 and tools["python"]["call_count"] == 25
    only_lee = await taught.rpc("traces.summary", user_id="lee")
    assert only_lee["traces"] == 8
    # The score sent before its trace is not lost.
    late = await taught.rpc("traces.get", user_id="dana", trace_id="tr-99")
    assert late["feedback"] == pytest.approx(0.95) and late["outcome"] == "success"
    hits = await taught.rpc("traces.search", text="release notes")
    assert [h["trace_id"] for h in hits["traces"]] == ["tr-99"]
    advice = await taught.rpc("advisor.recommendations")
    assert any(r["kind"] == "routing" and "qwen3:8b" in r["detail"]
               for r in advice["recommendations"])
    skills = (await taught.rpc("icl.skills"))["skills"]
    assert skills[0]["name"] == "search -> python" and skills[0]["count"] == 13


async def test_learned_bandit_and_grpo_route_code_to_the_better_model(taught: Tenant,
                                                                      nc: Any) -> None:
    learned = await taught.rpc("router.select_model", query=CODE, available_models=MODELS,
                               policy="learned")
    assert (learned["model"], learned["query_class"]) == ("codestral", "code")
    update = await taught.rpc("router.update_policy", policy="grpo")
    assert update["version"] >= 1
    for policy in ("bandit", "grpo"):
        picks = Counter()
        for _ in range(60):
            choice = await taught.rpc("router.select_model", query=CODE,
                                      available_models=MODELS, policy=policy)
            picks[choice["model"]] += 1
        assert picks["codestral"] >= 40, (policy, picks)
        again = [await taught.rpc("router.select_model", query=CODE, available_models=MODELS,
                                  policy=policy, decision_id="d-42") for _ in range(3)]
        assert len({a["model"] for a in again}) == 1  # the same id draws the same
    info = await nc.jetstream().stream_info(
        EVENTS, subjects_filter=f"habitus.v1.event.RoutingPolicyUpdated.{taught.name}._tenant")
    assert sum((info.state.subjects or {}).values()) >= 1


async def test_the_tenant_default_policy_and_its_errors(taught: Tenant) -> None:
    assert (await taught.rpc("router.set_default_policy", policy="learned"))["policy"] == \
        "learned"
    choice = await taught.rpc("router.select_model", query=CODE, available_models=MODELS)
    assert (choice["policy"], choice["model"]) == ("learned", "codestral")
    response = await taught.post("/v1/rpc/router.select_model",
                                 {"query": CODE, "available_models": MODELS,
                                  "policy": "oracle"})
    assert response.status_code == 400
    assert "heuristic" in response.text and "grpo" in response.text
    none = await taught.post("/v1/rpc/router.select_model", {"query": "Hi"})
    assert none.status_code == 400 and "available_models" in none.text
    fallback = await taught.rpc("router.select_model", query="Hi",
                                default_model="fallback-model")
    assert fallback["model"] == "fallback-model"


async def test_a_replay_of_the_traces_gives_the_same_aggregates(taught: Tenant, nc: Any,
                                                               pool: Any) -> None:
    before = await taught.rpc("traces.route_stats")
    await replay(resolve("traces.store"), nc, pool, timeout=60)

    async def same() -> bool:
        return bool(await taught.rpc("traces.route_stats") == before)

    await until(same)


async def test_route_and_traces_from_a_shell(taught: Tenant) -> None:
    import os
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HABITUS_GATEWAY_URL": taught.base, "HABITUS_API_KEY": taught.key}
        return subprocess.run([sys.executable, "-m", "habitus.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    routed = await asyncio.to_thread(cli, "route", CODE, "--models", ",".join(MODELS),
                                     "--policy", "learned")
    assert routed.returncode == 0, routed.stdout + routed.stderr
    assert "codestral" in routed.stdout and "code" in routed.stdout
    stats = await asyncio.to_thread(cli, "traces", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert '"traces": 25' in stats.stdout
    found = await asyncio.to_thread(cli, "traces", "search", "release notes")
    assert "tr-99" in found.stdout
