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
from collections.abc import AsyncIterator
from typing import Any

import httpx
import hypothesis
import pytest
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from habitus.auth.keys import create_key
from habitus.contract import METHODS
from habitus.db.migrate import migrate
from services.gateway.main import service as gateway_spec
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

#: examples per operation and generation mode: enough to reach every documented branch of a
#: small schema, few enough for the whole run to stay well under a minute on two cores
EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]


@pytest_asyncio.fixture(scope="module")
async def live(servers: ServerUrls, pool: Any) -> AsyncIterator[tuple[str, str, str]]:
    migrate(servers.database)
    settings = servers.settings(max_batch_items=20, max_item_bytes=16 * 1024,
                                max_body_bytes=256 * 1024,
                                expected_services="stability_detector,profile_renderer")
    async with (running(learning(LearningSettings(scheduler_enabled=False)), settings),
                running(profile(), settings), running(producers(), settings),
                running(gateway_spec, settings) as gateway):
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
