"""The bundled scenario (examples/scenarios/three_weeks.py) through the real system over HTTP.

Every service runs in-process (the same hosts `habitus serve` runs) on the session's real
NATS, Postgres and Redis, with the scenario's scripted model over real HTTP. The scenario is
replayed the way `habitus demo` replays it (the demo's own functions), then:

* each user's expected outcome, from the scenario itself (facets with state, PROFILE.md lines,
  tool rules, habits with review state, the habit steering a request, route stats, routing);
* tenant isolation: every tenant's key against every other tenant's users, on every read RPC
  of the table that takes a user, never shows a thing of theirs;
* a second run under fresh tenants, with every service host stopped after half the items and
  started again, ends with the same outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.contract.rpc import METHODS
from habitus.demo.api import Api, apis, configure, send
from habitus.demo.model import start_scripted_model
from habitus.demo.outcomes import act, outcomes, problems, route_count
from habitus.demo.progress import wait_caught_up
from habitus.demo.scenario import build_scenario, ordered_items
from habitus.demo.scripted_llm import ScriptedLlmServer
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.extractor.settings import ExtractorSettings
from services.habits.settings import HabitsSettings
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import every_service, skip_history

pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(300)]


def presets(llm_url: str) -> dict[str, Any]:
    llm = LlmSettings(base_url=llm_url, model="scripted", daily_calls_per_tenant=0,
                      daily_tokens_per_tenant=0, max_retries=1)
    return {
        "stability_detector": LearningSettings(),
        "tool_memory": ToolMemorySettings(semantic_recall=False),
        "extractor": ExtractorSettings(window_seconds=2, sweep_seconds=0.2, llm=llm),
        "habits": HabitsSettings(llm=llm),
    }


class System:
    def __init__(self, servers: ServerUrls, settings: Any, llm: ScriptedLlmServer):
        self.servers, self.settings, self.llm = servers, settings, llm
        self.base = ""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        async with every_service(self.settings, presets(self.llm.url)) as host:
            self.base = f"http://127.0.0.1:{host.bound_port}"
            yield self.base


@pytest_asyncio.fixture(scope="module")
async def system(servers: ServerUrls, nc: Any, tmp_path_factory: Any
                 ) -> AsyncIterator[System]:
    migrate(servers.database)
    # the extractor starts at the stream's end: earlier modules' material is not this test's
    await skip_history(servers.database, servers.nats, "extractor", "extractor.windows")
    with start_scripted_model(build_scenario()) as llm:
        yield System(servers, servers.settings(data_dir=tmp_path_factory.mktemp("scenario")),
                     llm)


async def new_tenants(pool: Any) -> tuple[Any, dict[str, str]]:
    names = {"acme": unique("acme"), "globex": unique("globex")}
    scenario = build_scenario(time.time(), names)
    keys = {t.tenant_id: await create_key(pool, t.tenant_id) for t in scenario.tenants}
    return scenario, keys


async def settle_and_act(api: dict[str, Api], scenario: Any,
                         servers: ServerUrls) -> dict[str, Any]:
    for _ in range(2):
        caught_up = await asyncio.to_thread(
            wait_caught_up, api, scenario, timeout=90, nats_url=servers.nats,
            database_url=servers.database)
        assert caught_up, "the projections never caught up"
        if _ == 0:
            await asyncio.to_thread(act, api, scenario)
    return await asyncio.to_thread(outcomes, api, scenario)


def comparable(found: dict[str, Any], scenario: Any) -> dict[str, Any]:
    """An outcome without what differs between two runs (tenant names, ids, times)."""
    out: dict[str, Any] = {}
    for _, u in scenario.users():
        got = found[u.user_id]
        out[u.user_id] = {
            "facets": sorted((f["class"], f["key"], f["value"], f["state"], f["pinned"])
                             for f in got["facets"]),
            "rules": sorted((r["tool_name"], r["priority"], r["rule"], tuple(r["tags"]))
                            for r in got["rules"]),
            "habits": sorted((h["when"], h["do"], h["status"], h["review_status"])
                             for h in got["habits"]),
            "steered_by": got["context"]["steered_by"] if got["context"] else None,
            "traces": route_count(got["route_stats"]),
        }
    for t in scenario.tenants:
        out[t.tenant_id.rsplit("_", 1)[0]] = [(r["learned"]["model"], r["heuristic"]["model"])
                                          for r in found[t.tenant_id]]
    return out


#: (what an uninterrupted run learned, its scenario, its keys), for the later tests
RESULT: dict[str, Any] = {}


async def test_the_scenario_teaches_every_user_what_its_story_says(
        system: System, servers: ServerUrls, pool: Any) -> None:
    scenario, keys = await new_tenants(pool)
    async with system.running() as base:
        api = apis(base, keys)
        await asyncio.to_thread(configure, api, scenario)
        await asyncio.to_thread(send, api, ordered_items(scenario))
        found = await settle_and_act(api, scenario, servers)
        RESULT.update(found=found, scenario=scenario, keys=keys, api=api)
        missing = problems(scenario, found)
        assert missing == [], "\n".join(missing)


async def test_no_tenant_reads_another_tenants_users(system: System, servers: ServerUrls,
                                                     pool: Any) -> None:
    if not RESULT:
        pytest.skip("needs the uninterrupted run")
    scenario, keys, found = RESULT["scenario"], RESULT["keys"], RESULT["found"]
    reads = sorted(name for name, spec in METHODS.items()
                   if not spec.changes_state and "user_id" in spec.params.model_fields)
    assert len(reads) >= 20, reads
    async with system.running() as base:
        probes = 0
        for owner, user in scenario.users():
            got = found[user.user_id]
            habit_id = got["habits"][0]["habit_id"] if got["habits"] else "h_" + "0" * 20
            rule = got["rules"][0] if got["rules"] else {"tool_name": "bash", "id": "r"}
            trace_id = f"{user.user_id}-ok-0"
            extra: dict[str, dict[str, Any]] = {
                "learning.get_facet": {"class": user.explain[0], "key": user.explain[1]},
                "learning.explain_facet": {"class": user.explain[0], "key": user.explain[1]},
                "memory.tool_rule_get": {"tool_name": rule["tool_name"], "id": rule["id"]},
                "memory.tool_rules_json": {"tool_name": rule["tool_name"]},
                "memory.tool_rules_recall": {"tool_name": rule["tool_name"]},
                "memory.tool_rules_for_prompt": {"tools": list(user.tools)},
                "prompt.context": {"tools": list(user.tools), "request": user.sample_request
                                   or "hello"},
                "traces.get": {"trace_id": trace_id},
                "traces.search": {"text": "fix"},
                "habits.get": {"habit_id": habit_id},
                "habits.select": {"request": user.sample_request or "hello"},
                "icl.context": {"request": user.sample_request or "hello", "examples": 3,
                                "skills": True},
                "router.select_model": {"query": "hello", "available_models": ["qwen3:14b"]},
            }
            for other in scenario.tenants:
                if other.tenant_id == owner.tenant_id:
                    continue
                api = Api(base, keys[other.tenant_id])
                try:
                    for method in reads:
                        params = {"user_id": user.user_id, **extra.get(method, {})}
                        response = await asyncio.to_thread(api.call, method, **params)
                        probes += 1
                        assert response.status_code in (200, 404), (method, response.text)
                        for secret in user.private:
                            assert secret.casefold() not in response.text.casefold(), (
                                f"{other.tenant_id}'s key read {secret!r} of "
                                f"{owner.tenant_id}/{user.user_id} through {method}")
                    profile = await asyncio.to_thread(api.profile_md, user.user_id)
                    for secret in user.private:
                        assert secret.casefold() not in profile.casefold()
                finally:
                    api.close()
        assert probes == len(reads) * len(scenario.users())


async def test_stopping_every_process_midway_changes_no_outcome(
        system: System, servers: ServerUrls, pool: Any) -> None:
    if not RESULT:
        pytest.skip("needs the uninterrupted run")
    scenario, keys = await new_tenants(pool)
    pairs = ordered_items(scenario)
    half = len(pairs) // 2
    async with system.running() as base:
        api = apis(base, keys)
        await asyncio.to_thread(configure, api, scenario)
        await asyncio.to_thread(send, api, pairs[:half])
    # every service host is stopped here; they start again on the same data and streams
    async with system.running() as base:
        api = apis(base, keys)
        await asyncio.to_thread(send, api, pairs[half:])
        found = await settle_and_act(api, scenario, servers)
    assert problems(scenario, found) == []
    assert comparable(found, scenario) == comparable(RESULT["found"], RESULT["scenario"])
