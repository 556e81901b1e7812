"""Every service's `/metrics`, after realistic traffic: help text on every family, no user id in
any label, and every family the dashboards and the runbook rely on present with a sample.

The whole stack runs in-process (every installed service, the extractor and habits with a
scripted model); two users of two tenants talk to it through the gateway: turns with
statements, tool failures and an edict, an email, traces with feedback, a habit declared,
`prompt.context`, `router.select_model`, a rejected item. Then each host's `/metrics` is
scraped. In-process hosts share one registry, so every scrape holds every family; each is
still scraped, so a host that serves no metrics fails here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from habitus.auth.keys import create_key
from habitus.llm import LlmSettings
from habitus.service import registry
from habitus.service.host import ServiceHost
from habitus.service.migrations import migrate
from services.extractor.settings import ExtractorSettings
from services.habits.settings import HabitsSettings
from services.profile_renderer.main import ProfileSettings
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from tests.conftest import ServerUrls
from tests.integration.test_erasure import model
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.llm_server import ScriptedLlm
from tests.support.services import running, skip_all_history

pytestmark = [pytest.mark.slow]

#: families that must be there with at least one sample after the traffic below
REQUIRED = [
    # pipeline RED per handler (FastStream's middleware)
    "faststream_received_messages_total",
    "faststream_received_processed_messages_duration_seconds",
    "faststream_received_processed_messages_total",
    # projections: throughput, consumer pending and ack-pending, checkpoint lag, DLQ
    "habitus_projection_applied_events_total",
    "habitus_projection_batch_duration_seconds",
    "habitus_projection_checkpoint_seq",
    "habitus_projection_pending_events",
    "habitus_projection_ack_pending_events",
    "habitus_projection_lag_events",
    # learning
    "habitus_learning_facets",
    "habitus_learning_rebuild_duration_seconds",
    # profile and prompt.context
    "habitus_profile_renders_total",
    "habitus_prompt_context_duration_seconds",
    "habitus_prompt_context_cache_hits_total",
    "habitus_prompt_context_cache_misses_total",
    # tools, routing
    "habitus_tool_rules_captured_total",
    "habitus_router_decisions_total",
    "habitus_router_reward",
    # habits
    "habitus_habits",
    "habitus_habits_review_queue",
    "habitus_habits_transitions_total",
    # extractor and LLM
    "habitus_extractor_windows_total",
    "habitus_llm_calls_total",
    "habitus_llm_tokens_total",
    "habitus_llm_call_duration_seconds",
    "habitus_llm_budget_remaining_ratio",
    # gateway
    "habitus_gateway_http_request_duration_seconds",
    "habitus_gateway_ingest_items_total",
    "habitus_gateway_ingest_rejected_total",
    "habitus_gateway_rpc_requests_total",
]
#: declared, but only a failure fills them (their help text and labels are still checked)
MAY_BE_EMPTY = {"habitus_dlq_events_total"}
USER_LABELS = {"user", "user_id", "userid", "uid"}


@pytest_asyncio.fixture(scope="module")
async def hosts(servers: ServerUrls, nc: Any, tmp_path_factory: Any
                ) -> AsyncIterator[dict[str, ServiceHost]]:
    migrate(servers.database)
    settings = servers.settings(data_dir=tmp_path_factory.mktemp("metrics"))
    with ScriptedLlm(responder=model) as llm:
        scripted = LlmSettings(base_url=llm.url, model="scripted", daily_calls_per_tenant=0,
                               daily_tokens_per_tenant=0)
        presets = {"stability_detector": LearningSettings(scheduler_enabled=False),
                   "profile_renderer": ProfileSettings(),
                   "tool_memory": ToolMemorySettings(semantic_recall=False),
                   "extractor": ExtractorSettings(window_tokens=40, window_seconds=3600,
                                                  sweep_seconds=0.1, llm=scripted),
                   "habits": HabitsSettings(llm=scripted)}
        await skip_all_history(servers.database, servers.nats)
        descriptors = registry.services()
        ordered = [d for d in descriptors if not d.public_http] + [
            d for d in descriptors if d.public_http]
        async with AsyncExitStack() as stack:
            started = {}
            for d in ordered:
                started[d.name] = await stack.enter_async_context(
                    running(d.configured(presets.get(d.name)), settings))
            yield started


class Tenant:
    def __init__(self, base: str, key: str):
        self.base, self.key = base, key

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
            return await client.post(path, json=body,
                                     headers={"Authorization": f"Bearer {self.key}"})

    async def rpc(self, method: str, **params: Any) -> Any:
        response = await self.post(f"/v1/rpc/{method}", params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    async def send(self, items: list[dict[str, Any]], *, partial: bool = False) -> Any:
        path = "/v1/events?partial=true" if partial else "/v1/events"
        response = await self.post(path, items)
        assert response.status_code in (200, 202, 207), response.text
        return response.json()


def traffic(user: str) -> list[dict[str, Any]]:
    """What an agent sends in a day: statements, an edict, tool failures, an email, a trace
    and feedback on it."""
    items = [turn_item(user, text) for text in (
        "Please keep it short, no preamble.", "I'm in Berlin and I use neovim for everything.",
        "Never use emoji with me.", "Keep answers short please, bullet points are fine.")]
    items[0]["payload"]["tool_calls"] = [
        {"tool_name": "shell", "ok": False, "output_summary": "permission denied"},
        {"tool_name": "shell", "ok": False, "output_summary": "permission denied"},
        {"tool_name": "shell", "ok": False, "output_summary": "permission denied"}]
    items[1]["payload"]["user_message"] = "Never email anyone outside example.com."
    items[1]["payload"]["tool_calls"] = [{"tool_name": "send_email", "ok": True}]
    now = time.time()
    items.append({"type": "TraceCompleted", "user_id": user, "payload": {
        "trace_id": f"tr-{user}", "query": "Draft a reply to the email.", "agent": "mail",
        "model": "qwen3:8b", "engine": "ollama", "result": "Drafted.", "outcome": "success",
        "started_at": now - 10, "ended_at": now - 6, "total_tokens": 120,
        "total_latency_seconds": 4.0,
        "steps": [{"step_type": "tool", "timestamp": now - 9, "duration_seconds": 1.0,
                   "input": {"tool": "send_email"}}]}})
    items.append({"type": "FeedbackGiven", "user_id": user, "payload": {
        "trace_id": f"tr-{user}", "score": 0.8}})
    items.append({"type": "EmailObserved", "user_id": user, "payload": {
        "message_id": f"<{user}@example.com>", "direction": "sent",
        "from": f"{user}@example.com", "to": ["sarah@example.com"], "subject": "Hi",
        "body": "Short note.", "sent_at": now - 60}})
    return items


async def until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


async def scrape(port: int) -> dict[str, Metric]:
    async with httpx.AsyncClient(timeout=30, verify=TLS) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200, response.text
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def sampled(families: dict[str, Metric], name: str) -> bool:
    """The family (under its name or, for counters, without `_total`) has a sample."""
    family = families.get(name) or families.get(name.removesuffix("_total"))
    return family is not None and bool(family.samples)


def user_id_leaks(families: dict[str, Metric], users: set[str]) -> list[str]:
    leaks = []
    for family in families.values():
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label.lower() in USER_LABELS:
                    leaks.append(f"{sample.name}: a label named {label}")
                if value in users or any(u in value for u in users):
                    leaks.append(f"{sample.name}{{{label}={value!r}}}: a user id")
    return leaks


async def test_every_service_exports_what_operations_needs_and_no_user_id(
        hosts: dict[str, ServiceHost], pool: Any) -> None:
    base = f"http://127.0.0.1:{hosts['gateway'].bound_port}"
    acme, other = unique("acme"), unique("other")
    a, b = Tenant(base, await create_key(pool, acme)), Tenant(base, await create_key(pool, other))
    dana, lee = unique("dana"), unique("lee")
    users = {dana, lee}
    for tenant, user in ((a, dana), (b, lee)):
        await tenant.send(traffic(user))
        # one item refused (an unknown type), the rest accepted
        await tenant.send([turn_item(user, "hello"), {"type": "NoSuchEvent", "user_id": user}],
                          partial=True)
        declared = await tenant.rpc("habits.declare", user_id=user,
                                    when="When I ask for a status report",
                                    do="Keep it to three bullet points")
        assert declared["outcome"] == "accepted_active", declared
        await tenant.rpc("router.select_model", user_id=user, query="Prove that 2 + 2 = 4",
                         available_models=["qwen3:8b", "llama3:70b"], record=True)
        await tenant.rpc("learning.rebuild_cache", user_id=user)

    async def rendered() -> bool:
        for tenant, user in ((a, dana), (b, lee)):
            context = await tenant.rpc("prompt.context", user_id=user)
            if context["version"] == 0:
                return False
        return True

    await until(rendered, "both profiles rendered")
    for tenant, user in ((a, dana), (b, lee)):  # a second read: the cache's hit
        await tenant.rpc("prompt.context", user_id=user)

    async def complete() -> dict[str, Metric] | None:
        families = await scrape(hosts["gateway"].bound_port)
        missing = [n for n in REQUIRED if not sampled(families, n)]
        return None if missing else families

    try:
        families = await until(complete, "every required family sampled", timeout=90)
    except AssertionError:
        families = await scrape(hosts["gateway"].bound_port)
        missing = [n for n in REQUIRED if not sampled(families, n)]
        raise AssertionError(f"no sample of {missing}") from None

    for name, host in hosts.items():
        scraped = families if name == "gateway" else await scrape(host.bound_port)
        habitus = {n: f for n, f in scraped.items()
                   if n.startswith(("habitus_", "faststream_"))}
        assert habitus, f"{name} serves no habitus or faststream metric"
        for family_name, family in habitus.items():
            assert family.documentation.strip(), f"{family_name} has no help text"
        assert user_id_leaks(scraped, users) == [], name
    for name in MAY_BE_EMPTY:
        assert name.removesuffix("_total") in families or name in families, name


def test_the_leak_check_finds_a_user_id_in_a_label() -> None:
    """The audit can fail: a label carrying a user id, or named user_id, is reported."""
    text = ("# HELP habitus_x_total x\n# TYPE habitus_x_total counter\n"
            'habitus_x_total{consumer="dana-1"} 1\n'
            "# HELP habitus_y y\n# TYPE habitus_y gauge\n"
            'habitus_y{user_id="someone"} 1\n')
    families = {f.name: f for f in text_string_to_metric_families(text)}
    leaks = user_id_leaks(families, {"dana-1"})
    assert len(leaks) == 2, leaks
    assert not sampled(families, "habitus_z_total")
    assert sampled(families, "habitus_x_total")
