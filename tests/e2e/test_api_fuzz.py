"""The live gateway against its own OpenAPI document, fuzzed by schemathesis.

The real services run in-process (learning, profile, producers, gateway) on real NATS, Postgres and
Redis. The document is loaded from the running gateway, so what is fuzzed is what is served; every
operation gets a bounded, derandomised set of valid and invalid requests, and each answer must be
no server error, a documented status, and match its documented schema.

The fuzzing runs in a worker thread because schemathesis calls over blocking HTTP while the
services answer on this test's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import hypothesis
import pytest
import pytest_asyncio
import schemathesis
import schemathesis.specs.openapi.schemas  # imported at collection: see below
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# schemathesis imports its OpenAPI loader lazily, and the fuzz runs in a worker thread; pytest
# rewrites that module's asserts on import (schemathesis is a pytest plugin), and CPython 3.11.7's
# parser can fail in a thread with "AST constructor recursion depth mismatch" (a CPython bug,
# seen here once). Imported here, at collection, in the main thread, it is parsed once and safely.
from habitus.auth.keys import create_key
from habitus.bus import EventPublisher
from habitus.contract import METHODS
from habitus.events import CATALOG
from habitus.events.domain import CandidateEmitted
from habitus.projection.wait import wait_applied
from habitus.service.migrations import migrate
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import every_service, skip_all_history

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

#: examples per operation and generation mode: enough to reach every documented branch of a
#: small schema, few enough for the whole run to stay well under a minute on two cores
EXAMPLES = 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]


@pytest_asyncio.fixture(scope="module")
async def live(servers: ServerUrls, pool: Any, nc: Any
               ) -> AsyncIterator[tuple[str, str, str]]:
    migrate(servers.database)
    # Every projection starts at the stream's end: `admin.erase_user` waits for every reader
    # of the user's events, and folding this worker's earlier modules' material first only
    # spends the erasure's deadline.
    await skip_all_history(servers.database, servers.nats)
    settings = servers.settings(max_batch_items=20, max_item_bytes=16 * 1024,
                                max_body_bytes=256 * 1024,
                                expected_services="stability_detector,profile_renderer,"
                                                  "tool_memory,trace_router")
    presets = {"stability_detector": LearningSettings(scheduler_enabled=False),
               "tool_memory": ToolMemorySettings(semantic_recall=False)}
    async with every_service(settings, presets) as gateway:
        tenant = unique("fz")
        key = await create_key(pool, tenant)
        yield f"http://127.0.0.1:{gateway.bound_port}", tenant, key


def fuzz(base_url: str, tenant: str, key: str) -> dict[str, str]:
    """Every operation's failures, by operation; empty when none failed.

    Valid requests name the key's own tenant when they send X-Habitus-Tenant: a random one is
    refused (403) before anything else is looked at, and would spend most examples there."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {key}"}
    failures: dict[str, str] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            fixed = ({"X-Habitus-Tenant": tenant}
                     if mode is schemathesis.GenerationMode.POSITIVE else None)

            @hypothesis.settings(max_examples=EXAMPLES, derandomize=True, database=None,
                                 deadline=None, phases=[Phase.explicit, Phase.generate],
                                 suppress_health_check=list(HealthCheck))
            @hypothesis.given(case=operation.as_strategy(mode, headers=fixed))
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS,
                                       timeout=30)

            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:  # collected, then reported together
                failures[f"{operation.method.upper()} {operation.path} ({mode.value})"] = (
                    f"{type(exc).__name__}: {exc}")
    return failures


async def test_the_gateway_answers_every_fuzzed_request_as_documented(
    live: tuple[str, str, str]
) -> None:
    base_url, tenant, key = live
    async with httpx.AsyncClient(base_url=base_url) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert {f"/v1/rpc/{name}" for name in METHODS} <= set(paths)
    failures = await asyncio.to_thread(fuzz, base_url, tenant, key)
    assert failures == {}, "\n\n".join(f"{op}\n{detail}" for op, detail in failures.items())


async def test_an_unknown_method_is_404_naming_the_methods(live: tuple[str, str, str]
                                                          ) -> None:
    base_url, _, key = live
    async with httpx.AsyncClient(base_url=base_url) as client:
        response = await client.post("/v1/rpc/learning.pin_facets", json={"user_id": "u"},
                                     headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert "learning.pin_facets" in error["message"]
    assert all(name in error["message"] for name in METHODS)


def lifecycle(base_url: str, key: str, user: str) -> dict[str, Any]:
    """One facet and one profile through every method, each answer checked against the document
    like a fuzzed one: random users rarely reach a facet that exists, so the results of pin,
    unpin, explain and the rest are only seen here."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {key}"}
    answers: dict[str, Any] = {}

    def call(path: str, body: Any = None, *, label: str | None = None, method: str = "POST",
             **kwargs: Any) -> Any:
        case = schema[path][method].Case(body=body, **kwargs) if body is not None else \
            schema[path][method].Case(**kwargs)
        response = case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS,
                                          timeout=30)
        markdown = path.endswith(".md") and response.status_code == 200
        answers[label or path] = (response.status_code,
                                  response.text if markdown else response.json())
        return answers[label or path][1]

    facet = {"user_id": user, "class": "style", "key": "verbosity"}
    call("/v1/rpc/learning.rebuild_cache", {"user_id": user})
    call("/v1/rpc/learning.list_facets", {"user_id": user})
    call("/v1/rpc/learning.get_facet", facet)
    call("/v1/rpc/learning.explain_facet", facet, label="explain")
    call("/v1/rpc/learning.pin_facet", facet)
    call("/v1/rpc/learning.explain_facet", facet, label="explain pinned")
    call("/v1/rpc/learning.unpin_facet", facet, label="unpin with evidence")
    call("/v1/rpc/learning.forget_facet", facet)
    call("/v1/rpc/learning.unpin_facet", facet, label="unpin forgotten")
    tone = {"user_id": user, "class": "style", "key": "tone"}
    call("/v1/rpc/learning.update_facet", {**tone, "value": "formal"})
    call("/v1/rpc/learning.unpin_facet", tone, label="unpin without evidence")
    call("/v1/rpc/learning.unpin_facet", tone, label="unpin again")
    call("/v1/rpc/learning.cache_stats", {"user_id": user})
    call("/v1/rpc/learning.reset_cache", {"user_id": user})
    profile = call("/v1/rpc/profile.get", {"user_id": user})["result"]
    notes = profile["markdown"] + "\nI prefer answers in French.\n"
    call("/v1/rpc/profile.save_notes", {"user_id": user, "markdown": notes,
                                        "base_version": profile["version"]})
    call("/v1/rpc/profile.save_notes", {"user_id": user, "markdown": notes,
                                        "base_version": profile["version"]}, label="stale save")
    call("/v1/rpc/prompt.context", {"user_id": user, "tools": ["search"], "budget_chars": 4000})
    call("/v1/users/{user_id}/profile.md", method="GET", path_parameters={"user_id": user})
    return answers


async def test_every_method_answers_as_documented_for_a_real_facet(
    live: tuple[str, str, str], nc: Any, pool: Any
) -> None:
    base_url, tenant, key = live
    user = "lifecycle"
    publisher = EventPublisher(nc.jetstream())
    now = time.time()
    for n in range(5):
        event = CATALOG.new(CandidateEmitted.model_validate({
            "class": "style", "key": "verbosity", "value": "terse", "cue_family": "explicit",
            "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{n}"}],
            "initial_confidence": 0.9, "observed_at": now - 60, "producer": "tests",
        }), tenant_id=tenant, user_id=user, producer="tests", occurred_at=now - 60)
        seq = (await publisher.publish(event)).seq
    await wait_applied(pool, "learning", "learning.cache", seq)

    answers = await asyncio.to_thread(lifecycle, base_url, key, user)

    statuses = {label: status for label, (status, _) in answers.items()}
    assert statuses.pop("unpin again") == 404  # nothing left to unpin
    assert statuses.pop("stale save") == 409
    assert set(statuses.values()) == {200}, statuses
    explain = answers["explain"][1]["result"]
    assert explain["state"] == "active"
    assert explain["values"][0]["families"][0]["family"] == "explicit"
    assert answers["explain pinned"][1]["result"]["user_multiplier"] == "inf"
    assert answers["unpin with evidence"][1]["result"]["state"] == "active"
    assert answers["unpin without evidence"][1]["result"] == {
        "class": "style", "key": "tone", "state": "dropped", "user_state": "auto"}
    assert "French" in answers["/v1/users/{user_id}/profile.md"][1]
