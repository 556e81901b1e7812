"""What the real services publish matches docs/asyncapi.json, and `CacheRebuilt`'s counts match
the facets it reports.

Two users of one tenant go through the gateway as an agent would report them: plain statements
and a correction, a veto, a sent email with a signature, a connected account, a tool rule, a
pin and a forget, a routed and recorded decision, a trace and its feedback. Then every message
of the tenant on both streams is read back and checked, body and headers, against the channel
its subject names in the checked-in document, and each user's `CacheRebuilt` events are walked
in order: `added`, `evicted` and `kept` must be what the Active sets before and after say.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.client import AsyncClient, email, provider_profile, trace, turn
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from services.tool_memory.main import build as tool_memory
from services.trace_router.main import build as trace_router
from tests.conftest import ServerUrls
from tests.support.asyncapi import (
    EventChecker,
    active_keys,
    cache_count_problems,
    tenant_messages,
)
from tests.support.factories import unique
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture(scope="module")
async def base(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    s = servers.settings()
    async with running(producers(), s), running(learning(LearningSettings()), s), \
            running(profile_renderer(), s), running(tool_memory(), s), \
            running(trace_router(), s), running(gateway, s) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


async def test_every_published_event_matches_the_document_and_cache_counts_add_up(
        base: str, servers: ServerUrls, pool: Any) -> None:
    tenant = unique("acme")
    client = AsyncClient(base, await create_key(pool, tenant), timeout=30)
    ana, ben = unique("ana"), unique("ben")
    now = time.time()
    said = {
        ana: ["I'd rather you skip the intro and keep answers short.",
              "Please answer me in German from now on.",
              "Never suggest jQuery, we dropped it.",
              "Actually, switch back to English."],
        ben: ["I use pnpm, not npm.", "Could you give me more detail in your answers?"],
    }
    for user, lines in said.items():
        for i, line in enumerate(lines):
            await client.ingest(turn(user, line, "Noted.", session_id="s1",
                                     at=now - 600 + 60 * i))
    await client.ingest(
        email(ana, sender=f"{ana}@acme.example", to="sam@acme.example", subject="Q3",
              body="Hi Sam,\n\nthe numbers are attached.\n\nBest,\nAna Lima\n"
                   "Head of Finance, Acme"),
        provider_profile(ben, "googlecalendar", "conn-1", timezone="Europe/Berlin",
                         name="Ben Ortiz"))
    await client.put_rule(ana, "gmail", "Never email Sarah before 9am.", priority="critical")
    decision = await client.route("Fix this Python traceback", ["qwen3:8b", "gpt-4o"],
                                  user=ben, record=True)
    await client.ingest(trace(ben, "Fix this Python traceback", "Done", agent="coder",
                              model=decision.model or "gpt-4o", outcome="success",
                              feedback=0.9, total_tokens=120))

    async def settled() -> bool:
        facets = {u: (await client.facets(u)).facets for u in (ana, ben)}
        return all(facets.values()) and any(f.key == "language" and f.value == "en"
                                            for f in facets[ana])

    deadline = time.monotonic() + 40
    while not await settled():
        assert time.monotonic() < deadline, "the statements were not learned in time"
        await asyncio.sleep(0.3)
    await client.pin(ben, "tooling", "package_manager")
    await client.forget(ana, "style", "verbosity")
    await asyncio.sleep(1.5)  # the renderer and the router publish their consequences
    await client.close()

    checker = EventChecker()
    messages = await tenant_messages(servers.nats, tenant)
    events = [checker.check(m.subject, m.data, m.headers) for m in messages]
    kinds = Counter(e["type"] for e in events)
    for expected in ("TurnRecorded", "EmailObserved", "ProviderProfileSynced",
                     "TraceCompleted", "CandidateEmitted", "CacheRebuilt", "ProfileRendered",
                     "ToolRuleUpserted", "FacetPinned", "RouteDecided"):
        assert kinds[expected], (expected, kinds)

    assert cache_count_problems(events) == []
    rebuilt: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["type"] == "CacheRebuilt":
            rebuilt[e["user_id"]].append(e["payload"])
    assert set(rebuilt) == {ana, ben}
    # the signature alone makes the name Provisional, which no count includes
    assert any(any(f["key"] == "name" for f in p["provisional"]) for p in rebuilt[ana])
    assert not any(("identity", "name") in active_keys(p) for p in rebuilt[ana])
    # the forget took verbosity out of the Active set: an eviction
    assert rebuilt[ana][-1]["evicted"] >= 1
    assert ("style", "verbosity") not in active_keys(rebuilt[ana][-1])
