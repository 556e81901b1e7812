"""The live gateway against its own OpenAPI document, fuzzed by schemathesis.

The real services run in-process (learning, profile, producers, gateway) on real NATS, Postgres and
Redis. The document is loaded from the running gateway, so what is fuzzed is what is served; every
operation gets a bounded, derandomised set of valid and invalid requests, and each answer must be
no server error, a documented status, and match its documented schema.

The fuzzing runs in a process of its own (`tests.support.gateway_fuzz`): schemathesis calls over
blocking HTTP while the services answer on this test's event loop, and a thread of this process
would share a CPython 3.11.7 parser counter with the gateway (see that module).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

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
from tests.support.http import TLS
from tests.support.services import every_service, skip_all_history

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

REPO = Path(__file__).resolve().parents[2]


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


async def test_the_gateway_answers_every_fuzzed_request_as_documented(
    live: tuple[str, str, str]
) -> None:
    base_url, tenant, key = live
    async with httpx.AsyncClient(base_url=base_url, verify=TLS) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    assert {f"/v1/rpc/{name}" for name in METHODS} <= set(paths)
    failures = await _in_own_process("fuzz", base_url, key, tenant)
    assert failures == {}, "\n\n".join(f"{op}\n{detail}" for op, detail in failures.items())


async def test_an_unknown_method_is_404_naming_the_methods(live: tuple[str, str, str]
                                                          ) -> None:
    base_url, _, key = live
    async with httpx.AsyncClient(base_url=base_url, verify=TLS) as client:
        response = await client.post("/v1/rpc/learning.pin_facets", json={"user_id": "u"},
                                     headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert "learning.pin_facets" in error["message"]
    assert all(name in error["message"] for name in METHODS)


async def _in_own_process(what: str, base_url: str, key: str, subject: str) -> Any:
    """Run `tests.support.gateway_fuzz` (schemathesis) against the gateway this process serves."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.gateway_fuzz", what, base_url, key, subject,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, err.decode()[-4000:]
    return json.loads(out.decode().strip().splitlines()[-1])


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

    answers = await _in_own_process("lifecycle", base_url, key, user)

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
