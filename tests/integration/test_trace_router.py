"""The trace router end to end over HTTP: traces and feedback for two models go in through the
gateway; the analyzer's figures match them, and the learned, bandit and GRPO policies route
code queries to the model that did better, with `RoutingPolicyUpdated` published. A tenant that
never chose a policy is routed by the heuristic until a class has enough traces and by them
after, the same whatever the order of its models; every analyzer, advisor and ICL answer is
exactly its typed result model.

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
from pydantic import BaseModel

from habitus.auth.keys import create_key
from habitus.bus import EVENTS
from habitus.contract import traces as contract
from habitus.projection.replay import replay
from habitus.service.migrations import migrate
from habitus.service.projections import resolve
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from services.trace_router.settings import RouterSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.own_servers import own_nc, own_pool, own_servers  # noqa: F401
from tests.support.services import every_service, skip_all_history
from tests.support.streams import events_on

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
    await skip_all_history(servers.database, servers.nats)  # this module's events only
    async with every_service(servers.settings(), presets) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


class Tenant:
    def __init__(self, base: str, key: str, name: str):
        self.base, self.key, self.name = base, key, name

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
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
    # per query class: statistics, and a class filter on the trace queries and the advice
    classes = {(c["query_class"], c["model"]): c
               for c in (await taught.rpc("traces.class_stats"))["classes"]}
    assert classes[("code", "qwen3:8b")]["count"] == 12
    assert classes[("code", "qwen3:8b")]["success_rate"] == 0.0
    assert classes[("code", "codestral")]["avg_reward"] > classes[("code", "qwen3:8b")][
        "avg_reward"]
    assert set(classes) == {("code", "qwen3:8b"), ("code", "codestral"),
                            ("short", "codestral")}
    short = await taught.rpc("traces.list", query_class="short")
    assert [t["trace_id"] for t in short["traces"]] == ["tr-99"]
    assert (await taught.rpc("traces.summary", query_class="code"))["traces"] == 24
    assert (await taught.rpc("advisor.recommendations", query_class="general"))[
        "recommendations"] == []


async def test_postgres_holds_the_text_sealed_and_the_api_answers_it_in_the_clear(
        taught: Tenant, pool: Any) -> None:
    late = "Summarise the release notes."
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT query, result FROM traces.traces WHERE tenant_id = %s AND user_id = %s "
            "AND trace_id = %s", (taught.name, "dana", "tr-99"))
        stored = await cur.fetchall()
        cur = await conn.execute(
            "SELECT term FROM traces.search_terms WHERE tenant_id = %s AND trace_id = %s",
            (taught.name, "tr-99"))
        terms = [r[0] for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT input, output FROM traces.steps WHERE tenant_id = %s AND trace_id = %s "
            "AND ordinal = 1", (taught.name, "tr-99"))
        step = await cur.fetchall()
    [(query, result)] = stored
    assert len(terms) == 5  # summarise, the, release, notes; and "done"
    for value in (query, result, *terms, *step[0]):
        assert isinstance(value, str) and value.startswith("hc1:"), value
        assert "release" not in value and "done" not in value and "search" not in value
    got = await taught.rpc("traces.get", user_id="dana", trace_id="tr-99")
    assert (got["query"], got["result"]) == (late, "done")
    assert got["steps"][1]["input"] == {"tool": "search"}
    hits = await taught.rpc("traces.search", text='"release notes" -broke')
    assert [(h["trace_id"], h["query"]) for h in hits["traces"]] == [("tr-99", late)]


async def test_advice_is_issued_as_an_event_when_it_changes(stack: str, pool: Any,
                                                            nc: Any) -> None:
    # its own tenant: the extra trace below must not change the shared tenant's counts
    name = unique("advised")
    tenant = Tenant(stack, await create_key(pool, name), name)
    await tenant.ingest([trace("dana", n, MODELS[n % 2 == 0], n % 2 == 0) for n in range(12)])

    async def issued() -> list[Any]:
        return await events_on(nc, EVENTS, f"habitus.v1.event.AdviceIssued.{name}._tenant.>")

    found = await until(issued)
    assert found[-1].payload.recommendations[0].kind == "routing"
    assert "qwen3:8b" in found[-1].payload.recommendations[0].detail
    # the relearn runs again on the next trace; the advice did not change, so no new event
    await tenant.ingest([trace("dana", 500, "codestral", True)])

    async def relearned() -> bool:
        return bool((await tenant.rpc("traces.summary"))["traces"] == 13)

    await until(relearned)
    await asyncio.sleep(2.0)
    assert len(await issued()) == len(found)


async def test_learned_bandit_and_grpo_route_code_to_the_better_model(taught: Tenant,
                                                                      nc: Any) -> None:
    learned = await taught.rpc("router.select_model", query=CODE, available_models=MODELS,
                               policy="learned")
    assert (learned["model"], learned["query_class"]) == ("codestral", "code")
    update = await taught.rpc("router.update_policy", policy="grpo")
    assert update["version"] >= 1
    for policy in ("bandit", "grpo"):
        picks: Counter[str] = Counter()
        for _ in range(60):
            choice = await taught.rpc("router.select_model", query=CODE,
                                      available_models=MODELS, policy=policy)
            picks[choice["model"]] += 1
        assert picks["codestral"] >= 40, (policy, picks)
        again = [await taught.rpc("router.select_model", query=CODE, available_models=MODELS,
                                  policy=policy, decision_id="d-42") for _ in range(3)]
        assert len({a["model"] for a in again}) == 1  # the same id draws the same
    info = await nc.jetstream().stream_info(
        EVENTS, subjects_filter=f"habitus.v1.event.RoutingPolicyUpdated.{taught.name}._tenant.>")
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


# --------------------------------------------------------------------------- the default policy

HOSTED = ["gpt-4o-mini", "gpt-4o"]
SHORT = "Hi there"


async def test_the_default_policy_follows_the_traces(stack: str, pool: Any, nc: Any) -> None:
    """No policy chosen, no update requested: the heuristic (by the models' prices) until the
    class has 3 traces (the stack's `min_samples`), the traces after, and the service publishes
    the learned table by itself."""
    name = unique("initech")
    tenant = Tenant(stack, await create_key(pool, name), name)

    async def route(query: str) -> dict[str, Any]:
        """The answer for the models in both orders, once both are the same (the decision reads
        the tenant's state anew at most every second, so a pair of calls may straddle new
        traces): the order of the models changes nothing, not even the reason."""
        async def agreed() -> dict[str, Any] | None:
            first, second = [await tenant.rpc("router.select_model", query=query,
                                              available_models=models)
                             for models in (HOSTED, HOSTED[::-1])]
            return first if first == {**second, "decision_id": first["decision_id"]} else None

        answer: dict[str, Any] = await until(agreed)
        return answer

    cold = await route(CODE)
    assert (cold["policy"], cold["model"], cold["query_class"]) == ("learned", "gpt-4o", "code")
    assert cold["reason"] == (
        "heuristic (only 0 code traces, 3 needed): code, no code model: the priciest model "
        "(both of unknown size; price stands in for size): gpt-4o $12.50 per 1M tokens vs "
        "gpt-4o-mini $0.75 per 1M tokens")
    assert (await route(SHORT))["model"] == "gpt-4o-mini"  # short: the cheapest

    await tenant.ingest([trace("kim", 0, "gpt-4o", True), trace("kim", 1, "gpt-4o-mini", False)])

    async def reason_starts(prefix: str, query: str = CODE) -> dict[str, Any] | None:
        answer = await route(query)
        return answer if answer["reason"].startswith(prefix) else None

    early = await until(lambda: reason_starts("heuristic (only 2 code traces, 3 needed): "))
    assert early["model"] == "gpt-4o"

    await tenant.ingest([trace("kim", n, HOSTED[n % 2 == 0], n % 2 == 0) for n in range(2, 24)]
                        + [trace("kim", 100 + n, HOSTED[n % 2 == 0], n % 2 == 0, SHORT)
                           for n in range(4)])
    learned = await until(lambda: reason_starts("learned from 24 code traces: gpt-4o 0.96 vs "
                                                "gpt-4o-mini 0.12"))
    assert learned["model"] == "gpt-4o"
    # where the traces contradict the heuristic, they win: short queries went better on gpt-4o
    short = await until(lambda: reason_starts("learned from 4 short traces: ", SHORT))
    assert short["model"] == "gpt-4o"

    # the service relearns by itself: the learned table is published (no update was asked
    # for), and once it is, the decision reads it and no longer notes its absence
    async def learned_table() -> bool:
        updates = await events_on(
            nc, EVENTS, f"habitus.v1.event.RoutingPolicyUpdated.{name}._tenant.>")
        tables = [e.payload.parameters.get("table") for e in updates
                  if e.payload.policy == "learned"]
        return bool(tables) and tables[-1] == {"code": "gpt-4o", "short": "gpt-4o"}

    await until(learned_table)

    async def from_the_table() -> bool:
        answer = await route(CODE)
        return bool(answer["reason"] == "learned from 24 code traces: gpt-4o 0.96 vs "
                                        "gpt-4o-mini 0.12")

    await until(from_the_table)


# --------------------------------------------------------------------------- typed results

TYPED: dict[str, type[BaseModel]] = {
    "traces.summary": contract.TraceSummary, "traces.route_stats": contract.RouteStatsList,
    "traces.tool_stats": contract.ToolStatsList, "traces.list": contract.TracePage,
    "traces.get": contract.TraceDetail, "traces.search": contract.TraceHits,
    "traces.export": contract.TraceExport,
    "advisor.recommendations": contract.AdvisorReport, "icl.examples": contract.IclExamples,
    "icl.skills": contract.IclSkills, "traces.class_stats": contract.ClassStatsList,
    "icl.context": contract.IclContext,
}


async def test_every_answer_is_exactly_its_result_model(taught: Tenant) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("traces.summary", {}), ("traces.summary", {"user_id": "lee"}),
        ("traces.summary", {"outcome": "success", "since": T0}),  # from the traces, not sums
        ("traces.route_stats", {}), ("traces.route_stats", {"outcome": "failure"}),
        ("traces.tool_stats", {}), ("traces.tool_stats", {"model": "codestral"}),
        ("traces.list", {"limit": 2}), ("traces.list", {"user_id": "dana"}),
        ("traces.get", {"user_id": "dana", "trace_id": "tr-99"}),
        ("traces.get", {"user_id": "dana", "trace_id": "tr-1"}),
        ("traces.search", {"text": "done"}), ("traces.export", {"limit": 3}),
        ("advisor.recommendations", {}), ("icl.examples", {}), ("icl.skills", {}),
        ("traces.class_stats", {}), ("traces.class_stats", {"query_class": "code"}),
        ("icl.context", {"user_id": "dana", "request": CODE, "examples": 2, "skills": True}),
    ]
    for method, params in calls:
        answer = await taught.rpc(method, **params)
        typed = TYPED[method].model_validate(answer)  # every field known, none missing
        assert typed.model_dump(mode="json", by_alias=True) == answer, (method, params)
    page = contract.TracePage.model_validate(await taught.rpc("traces.list", limit=2))
    assert len(page.traces) == 2 and page.next is not None
    rest = contract.TracePage.model_validate(await taught.rpc("traces.list", after=page.next))
    assert len(rest.traces) == 23 and rest.next is None
    one = contract.TraceDetail.model_validate(
        await taught.rpc("traces.get", user_id="dana", trace_id="tr-1"))
    assert [s.tool_name for s in one.steps] == [None, "search", "python"]
    assert one.query_class == "code"
    assert (one.prompt_tokens, one.completion_tokens) == (0, 100)  # as the steps' outputs say
    export = contract.TraceExport.model_validate(await taught.rpc("traces.export", limit=3))
    assert export.count == 3 and len(export.jsonl.splitlines()) == 3
    for line in export.jsonl.splitlines():
        contract.TraceDetail.model_validate_json(line)  # a line is a whole trace
    examples = contract.IclExamples.model_validate(await taught.rpc("icl.examples"))
    assert examples.examples and examples.examples[0].tool_sequence == ["search", "python"]
    skills = contract.IclSkills.model_validate(await taught.rpc("icl.skills"))
    assert skills.skills[0].sequence == ["search", "python"]
    advice = contract.AdvisorReport.model_validate(await taught.rpc("advisor.recommendations"))
    assert advice.analyzed == 25 and {r.kind for r in advice.recommendations} == {"routing"}
    summary = contract.TraceSummary.model_validate(await taught.rpc("traces.summary"))
    assert set(summary.step_types) == {"llm", "tool"} and summary.traces == 25
