"""Tool-memory capture throughput: TurnRecorded events read by `tools.capture` (5 % of them
edicts that become rules, published with their PubAcks before each batch commits, plus the
first-seen times in Postgres), as a ratio to raw JetStream pull + ack of the same messages."""

from __future__ import annotations

import time
from typing import Any

import pytest

from habitus.events import CATALOG
from habitus.events.ingest import ToolCall, TurnRecorded
from habitus.projection import ProjectionRunner
from habitus.service.migrations import migrate
from habitus.telemetry.gc_tuning import tune_gc
from services.tool_memory.main import build
from services.tool_memory.projection import CaptureProjection
from services.tool_memory.settings import ToolMemorySettings
from tests.bench.test_bench_runner import raw_pull_ack
from tests.conftest import ServerUrls
from tests.integration.runner_support import publish
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio
N = 20_000
NOW = 1_790_000_000.0
EDICTS = [
    "Never email Sarah at sarah@example.com.",
    "Don't run shell commands with sudo. Stop using browser for that.",
    "Please never use the terminal for deploys",
    "Do not post in #general on Slack.",
]
MESSAGES = [
    "thanks, that works",
    "can you look at the failing test in the parser module",
    "I don't know why it failed, can you check the logs?",
    "Send Sarah an update when you can.",
    "shorter please, and use the staging cluster",
]
TOOLS = [("send_email", True), ("shell", True), ("browser", True), ("calendar", True)]


def turn(tenant: str, i: int) -> Any:
    user = f"u{i % 200}"
    t = NOW + i * 7.0
    edict = i % 20 == 0  # 5 %
    message = EDICTS[(i // 20) % len(EDICTS)] if edict else MESSAGES[i % len(MESSAGES)]
    calls = [ToolCall(tool_name=name, ok=ok) for name, ok in TOOLS[: 1 + i % len(TOOLS)]]
    return CATALOG.new(TurnRecorded(
        session_id=f"s{i % 50}", turn_id=f"t{i}", channel="web", user_message=message,
        assistant_message="x" * (50 + i % 200), user_at=t, assistant_at=t + 3,
        tool_calls=calls), tenant_id=tenant, user_id=user, producer="bench", occurred_at=t)


async def test_capture_ratio(servers: ServerUrls, nc: Any, pool: Any, record: Any) -> None:
    migrate(servers.database)
    tenant = unique("bench")
    events = [turn(tenant, i) for i in range(N)]
    for i in range(0, N, 2000):
        await publish(nc, events[i : i + 2000])
    subject = f"habitus.v1.ingest.turn.{tenant}.>"
    before = await raw_pull_ack(nc, subject, N)

    projection = CaptureProjection(ToolMemorySettings())
    projection.filter_subjects = [subject]  # this run's turns only (the shape of the service)
    config = build().runner_config
    runner = ProjectionRunner(projection, nc, pool, config=config)
    tune_gc()
    started = time.perf_counter()
    await runner.run_until_caught_up(timeout=600)
    rate = N / (time.perf_counter() - started)
    baseline = (before + await raw_pull_ack(nc, subject, N)) / 2

    info = await nc.jetstream().stream_info(
        "HABITUS_EVENTS", subjects_filter=f"habitus.v1.event.ToolRuleUpserted.{tenant}.>")
    emitted = sum((info.state.subjects or {}).values())
    assert emitted >= N // 20  # every edict turn published its rules
    record("tool_memory_capture", turns=N, batch=config.batch_size, rules_published=emitted,
           raw_pull_ack_per_s=round(baseline), turns_per_s=round(rate),
           ratio=round(rate / baseline, 3), target=">= 0.5")
