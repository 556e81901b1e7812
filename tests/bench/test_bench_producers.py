"""Producers throughput: TurnRecorded events processed by the producers' projection (heuristic
state per session in Postgres, reflection cues, candidates published with their PubAcks before
each batch commits), as a ratio to raw JetStream pull+ack of the same messages: on five
repeated texts (the figure's history) and on texts each of their own, with the statements read
in a process of their own (the service's default) and in a worker thread."""

from __future__ import annotations

import time
from typing import Any

import pytest

from habitus.events import CATALOG
from habitus.events.ingest import TurnRecorded
from habitus.projection import ProjectionRunner
from habitus.service.migrations import migrate
from habitus.telemetry.gc_tuning import tune_gc
from services.producers.main import build
from services.producers.projection import ProducersProjection
from services.producers.reading.ahead import in_thread
from services.producers.reading.apart import ReaderProcesses, in_processes
from services.producers.reading.reader import StatementReader
from tests.bench.test_bench_runner import raw_pull_ack
from tests.conftest import ServerUrls
from tests.integration.runner_support import publish
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio
N = 20_000
NOW = 1_790_000_000.0
MESSAGES = [
    "thanks, that works",
    "can you look at the failing test in the parser module",
    "shorter please",
    "I realized I prefer terse answers. Going forward, skip the disclaimers.",
    "ok",
]


def turn(tenant: str, i: int, *, distinct: bool = False) -> Any:
    """The `i`th turn; `distinct`: every user message a text of its own (a ticket number
    added), as in real chat, where reading each text once per batch and the reader's memo of
    texts that stated nothing help far less than on five repeated texts."""
    user, session = f"u{i % 100}", f"s{(i // 100) % 20}"
    t = NOW + i * 7.0
    message = MESSAGES[i % len(MESSAGES)]
    return CATALOG.new(TurnRecorded(
        session_id=session, turn_id=f"t{i}", channel="web",
        user_message=f"{message} (#{i})" if distinct else message,
        assistant_message="x" * (50 + i % 200),
        user_at=t, assistant_at=t + 3, previous_assistant_at=t - 12,
    ), tenant_id=tenant, user_id=user, producer="bench", occurred_at=t)


@pytest.mark.parametrize("mix", ["repeated", "distinct"])
@pytest.mark.parametrize("placement", ["processes", "thread"])
async def test_turns_processed_ratio(servers: ServerUrls, nc: Any, pool: Any, record: Any,
                                     mix: str, placement: str) -> None:
    """`processes` is the service's default (HABITUS_PRODUCERS_READER_PROCESSES=1): the
    statements are read in a process of their own; `thread`, in a worker thread (0)."""
    migrate(servers.database)
    tenant = unique("bench")
    events = [turn(tenant, i, distinct=mix == "distinct") for i in range(N)]
    for i in range(0, N, 2000):
        await publish(nc, events[i : i + 2000])
    subject = f"habitus.v1.ingest.turn.{tenant}.>"
    before = await raw_pull_ack(nc, subject, N)

    processes = ReaderProcesses(1) if placement == "processes" else None
    if processes is not None:
        await processes.read(["warm up"])  # as the service does before its first turn
        reading = in_processes(processes)
    else:
        reader = StatementReader()
        reader.warm()  # as the service does before its first turn (services/producers/main.py)
        reading = in_thread(reader)
    projection = ProducersProjection(reading)
    projection.filter_subjects = [subject]  # this run's turns only (the shape of the service)
    config = build().runner_config
    runner = ProjectionRunner(projection, nc, pool, config=config)
    tune_gc()
    try:
        started = time.perf_counter()
        await runner.run_until_caught_up(timeout=600)
        rate = N / (time.perf_counter() - started)
    finally:
        if processes is not None:
            await processes.stop()
    baseline = (before + await raw_pull_ack(nc, subject, N)) / 2

    info = await nc.jetstream().stream_info(
        "HABITUS_EVENTS", subjects_filter=f"habitus.v1.event.CandidateEmitted.{tenant}.>")
    emitted = sum((info.state.subjects or {}).values())
    assert emitted > N // 10  # the producers really produced
    name = "producers_turns" + ("_distinct" if mix == "distinct" else "") + (
        "_thread" if placement == "thread" else "")
    record(name, turns=N, batch=config.batch_size, candidates=emitted,
           raw_pull_ack_per_s=round(baseline), turns_per_s=round(rate),
           ratio=round(rate / baseline, 3))


def test_statement_reading_cost_per_turn(record: Any) -> None:
    """What reading statements adds per turn on this mix, the way the projection calls it (one
    batch per run of turns), against doing nothing (the cost of building the same list)."""
    reader = StatementReader()
    reader.read(["warm up the encoder and the bank"])
    batch = 200
    messages = [MESSAGES[i % len(MESSAGES)] for i in range(N)]
    started = time.perf_counter()
    for i in range(0, N, batch):
        reader.read(messages[i : i + batch])
    per_turn_ms = (time.perf_counter() - started) / N * 1000
    reached = len(reader.pending(messages[:1000])) / 1000
    record("statement_reading", turns=N, batch=batch, ms_per_turn=round(per_turn_ms, 4),
           clauses_encoded_per_turn=round(reached, 3), target="<= 0.5 ms per turn")
