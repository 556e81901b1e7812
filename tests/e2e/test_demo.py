"""`run_demo`, the function `habitus demo` runs once the system is up, against every service
in-process with the scenario's scripted model: it replays the scenario, shows every user and
reports every expectation met."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from habitus.auth.keys import create_key
from habitus.demo.model import start_scripted_model
from habitus.demo.run import run_demo
from habitus.demo.scenario import build_scenario
from habitus.service.migrations import migrate
from tests.conftest import ServerUrls
from tests.e2e.test_scenario import presets
from tests.support.asyncapi import EventChecker, cache_count_problems, tenant_messages
from tests.support.factories import unique
from tests.support.services import every_service, skip_history

pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_run_demo_shows_every_user_and_meets_every_expectation(
        servers: ServerUrls, nc: Any, pool: Any, tmp_path: Any) -> None:
    migrate(servers.database)
    await skip_history(servers.database, servers.nats, "extractor", "extractor.windows")
    tenants = {"acme": unique("acme"), "globex": unique("globex")}
    key = await create_key(pool, unique("dev"))
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False)
    with start_scripted_model(build_scenario()) as llm:
        async with every_service(servers.settings(data_dir=tmp_path), presets(llm.url)
                                 ) as host:
            ok = await asyncio.to_thread(
                run_demo, f"http://127.0.0.1:{host.bound_port}", key, console=console,
                nats_url=servers.nats, database_url=servers.database, scripted=True,
                timeout=120, tenants=tenants)
    text = buffer.getvalue()
    assert ok, text
    assert "every expectation of the scenario met" in text
    for user in ("sam", "priya", "marco", "lena"):
        assert f"/{user}" in text
    for shown in ("PROFILE.md", "learning.explain_facet", "Tool rules", "Habits",
                  "prompt.context", "traces.route_stats", "router.select_model",
                  "Projections catching up"):
        assert shown in text, shown

    # every event the demo made the services publish is what docs/asyncapi.json says, and
    # every CacheRebuilt's counts are those of the Active facets it lists
    checker = EventChecker()
    events = [checker.check(m.subject, m.data, m.headers)
              for tenant in tenants.values()
              for m in await tenant_messages(servers.nats, tenant)]
    types = {e["type"] for e in events}
    assert {"TurnRecorded", "EmailObserved", "CandidateEmitted", "CacheRebuilt",
            "ProfileRendered", "ToolRuleUpserted", "TraceCompleted", "HabitSuggested"
            } <= types, sorted(types)
    assert len(events) > 200, len(events)
    assert cache_count_problems(events) == []
