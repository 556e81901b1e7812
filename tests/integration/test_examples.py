"""The integration examples run as an integrator runs them: as their own processes.

* `examples/subscriber.py` on the embedded NATS handles every `CacheRebuilt` and
  `ToolRuleUpserted` exactly once although it is killed (SIGKILL) between handling an event and
  acking it, and events are published while it is down.
* `examples/agent_client.py` completes its loop against an in-process stack over HTTP, and
  what it reported is accepted and folded (its traces are in `traces.summary`).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import EVENTS, EventPublisher, PublishResult
from habitus.events import CATALOG, Event
from habitus.events.domain import (
    ActiveFacet,
    CacheRebuilt,
    RouteDecided,
    ToolRuleDeleted,
    ToolRuleUpserted,
)
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.producers.main import service as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as stability_detector
from services.stability_detector.settings import LearningSettings
from services.tool_memory.main import build as tool_memory
from services.tool_memory.settings import ToolMemorySettings
from services.trace_router.main import build as trace_router
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SUBSCRIBER = ROOT / "examples" / "subscriber.py"
AGENT = ROOT / "examples" / "agent_client.py"
HANDLED = re.compile(r"^handled event (\S+) seq \d+: ")
SKIPPED = re.compile(r"^skipped \(already handled\) event (\S+) ")


def events(tenants: list[str], n: int) -> list[Event[Any]]:
    """n events of the two followed types, over two tenants and three users each."""
    out: list[Event[Any]] = []
    for i in range(n):
        tenant, user = tenants[i % 2], f"u{i % 3}"
        payload: Any = (
            CacheRebuilt(as_of=1_764_000_000.0 + i, added=1, evicted=0, kept=i, total_size=i + 1,
                         active=[ActiveFacet.model_validate(
                             {"class": "style", "key": "verbosity", "value": "terse",
                              "stability": 2.5})])
            if i % 2 else
            ToolRuleUpserted(rule_id=f"r{i}", tool_name="send_email", rule=f"rule {i}"))
        out.append(CATALOG.new(payload, tenant_id=tenant, user_id=user, producer="tests"))
    return out


def others(tenant: str) -> list[Event[Any]]:
    """Events of types the subscriber does not follow."""
    return [CATALOG.new(ToolRuleDeleted(rule_id="r0", tool_name="send_email"),
                        tenant_id=tenant, user_id="u0", producer="tests"),
            CATALOG.new(RouteDecided(query_id="q1", model="m", policy="heuristic", reason="r"),
                        tenant_id=tenant, user_id="u0", producer="tests")]


async def publish(nc: Any, batch: list[Event[Any]]) -> list[PublishResult]:
    results = await EventPublisher(nc.jetstream()).publish_many(batch)
    stored = [r for r in results if isinstance(r, PublishResult) and r.stream == EVENTS]
    assert len(stored) == len(batch), results
    return stored


class Subscriber:
    """examples/subscriber.py as a child process, its output collected line by line."""

    def __init__(self, nats_url: str, durable: str, state: Path):
        self.args = [str(SUBSCRIBER), "--nats-url", nats_url, "--durable", durable,
                     "--state", str(state), "--from", "new", "--ack-wait", "2",
                     "--batch", "5", "--decode", "habitus"]
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, *extra: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, *self.args, *extra, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        self._reader = asyncio.ensure_future(self._read(self.proc))
        await self.wait_for(lambda: any(x.startswith("subscribed:") for x in self.lines), 30)

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            self.lines.append(raw.decode().rstrip("\n"))

    async def wait_for(self, check: Any, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            assert self.proc is not None
            assert self.proc.returncode is None, "\n".join(self.lines)
            assert asyncio.get_running_loop().time() < deadline, "\n".join(self.lines)
            await asyncio.sleep(0.01)

    async def exit_code(self, timeout: float) -> int:
        assert self.proc is not None and self._reader is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._reader
        return code

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert await self.exit_code(10) == -signal.SIGKILL


def activity(state: Path) -> list[str]:
    """The handler's effect log: one row per handling, in order."""
    with sqlite3.connect(state) as db:
        return [row[0] for row in db.execute("SELECT event_id FROM activity ORDER BY n")]


async def test_the_subscriber_handles_each_event_once_across_a_kill(
        servers: ServerUrls, nc: Any, tmp_path: Path) -> None:
    tenants = [unique("acme"), unique("globex")]
    published = events(tenants, 40)
    mine = {e.event_id for e in published}
    state = tmp_path / "subscriber.sqlite"
    sub = Subscriber(servers.nats, unique("example_subscriber"), state)

    # Slowed between commit and ack, so the kill lands in the window that matters: the event
    # is handled (committed) but not acked, and will be delivered again.
    await sub.start("--slow", "0.5")
    await publish(nc, [*published[:25], *others(tenants[0])])
    await sub.wait_for(lambda: state.exists() and len(activity(state)) >= 8, 60)
    await sub.kill()
    first_run = list(sub.lines)
    done = activity(state)
    assert 8 <= len([e for e in done if e in mine]) < 25

    # Published while it is down: nothing of it may be missed.
    await publish(nc, [*published[25:], *others(tenants[1])])

    sub.lines = []
    await sub.start()
    # Complete, and the event killed between commit and ack came again and was recognised.
    await sub.wait_for(lambda: mine <= set(activity(state)) and any(
        (m := SKIPPED.match(x)) and m.group(1) == done[-1] for x in sub.lines), 60)
    sub.proc.send_signal(signal.SIGTERM)  # a graceful stop
    assert await sub.exit_code(30) == 0, "\n".join(sub.lines)
    second_run = sub.lines

    # Only what the test published counts: the stream is shared (every tenant is followed).
    handled = [e for e in activity(state) if e in mine]
    assert not [e for e, n in Counter(handled).items() if n > 1], "an event was handled twice"
    assert set(handled) == mine
    assert handled[:len(done)] == [e for e in done if e in mine]
    # What was printed: never twice (a line may be lost in the kill, its effect is not).
    printed = [m.group(1) for x in first_run + second_run if (m := HANDLED.match(x))]
    assert len(printed) == len(set(printed))
    assert set(printed) >= {e.event_id for e in published[25:]}
    assert any(x.startswith("stopped after") for x in second_run)
    assert any(x.startswith("subscribed:") and "resuming after" in x for x in second_run)


async def test_the_subscriber_recreates_a_lost_durable_after_what_it_handled(
        servers: ServerUrls, nc: Any, tmp_path: Path) -> None:
    tenants = [unique("acme"), unique("globex")]
    published = events(tenants, 6)
    state, durable = tmp_path / "subscriber.sqlite", unique("example_subscriber")
    sub = Subscriber(servers.nats, durable, state)
    sub.args += [arg for t in tenants for arg in ("--tenant", t)]
    await sub.start("--max", "3")
    seq = max(r.seq for r in await publish(nc, published[:3]))
    assert await sub.exit_code(60) == 0, "\n".join(sub.lines)

    await nc.jetstream().delete_consumer(EVENTS, durable)
    await publish(nc, published[3:])
    sub.lines = []
    await sub.start("--max", "3", "--decode", "json")
    assert await sub.exit_code(60) == 0, "\n".join(sub.lines)
    assert any("created at stream seq" in x for x in sub.lines), sub.lines
    assert sub.lines[0].endswith(f"habitus.v1.event.ToolRuleUpserted.{tenants[1]}.>; "
                                 f"created at stream seq {seq + 1} (after the last handled)")
    assert activity(state) == [e.event_id for e in published]


# --------------------------------------------------------------------------- the agent


@pytest_asyncio.fixture
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    settings = servers.settings()
    async with running(producers, settings), \
            running(stability_detector(LearningSettings(debounce_seconds=0.2)), settings), \
            running(profile_renderer(), settings), \
            running(tool_memory(ToolMemorySettings(semantic_recall=False)), settings), \
            running(trace_router(), settings), \
            running(gateway, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


async def test_the_agent_client_completes_its_loop(stack: str, pool: Any) -> None:
    key = await create_key(pool, unique("acme"))
    user = unique("alice")
    env = {**os.environ, "HABITUS_URL": stack, "HABITUS_API_KEY": key}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENT), "--user", user, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode()
    assert proc.returncode == 0, text
    for step in ("prompt.context", "router", "answer", "/v1/events", "traces.summary"):
        assert step in text, text
    assert text.count("TurnRecorded accepted") == 4, text
    assert text.count("TraceCompleted accepted") == 4 and text.count("FeedbackGiven accepted") == 4
    # It waited for what it taught: the correction of its second turn is a preference (after
    # a rebuild), the edict of its third a rule for send_email.
    assert "tool rule        [critical] send_email: Never email Sarah" in text, text
    assert "| - **style/verbosity**: terse" in text, text

    async def rpc(method: str, **params: Any) -> Any:
        async with httpx.AsyncClient(base_url=stack, timeout=30, verify=TLS) as client:
            response = await client.post(f"/v1/rpc/{method}", json=params,
                                         headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        return response.json()["result"]

    deadline = asyncio.get_running_loop().time() + 30
    while True:
        summary = await rpc("traces.summary", user_id=user)
        if summary["traces"] == 4 and summary.get("avg_feedback") is not None:
            break
        assert asyncio.get_running_loop().time() < deadline, summary
        await asyncio.sleep(0.1)
    # The edict in the third turn became a rule for send_email.
    while not (await rpc("memory.tool_rule_list", user_id=user))["rules"]:
        assert asyncio.get_running_loop().time() < deadline + 30, "no rule captured"
        await asyncio.sleep(0.1)
