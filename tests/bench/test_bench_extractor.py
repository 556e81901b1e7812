"""Extractor benchmarks.

1. Cost per 1,000 ingested events at three traffic levels: the extractor service (its windows
   projection and worker, real JetStream and Postgres) reads realistic material (chat turns,
   mail, document chunks; `extractor_corpus`) published at 1, 10 and 300 events a second per
   user, and asks a scripted OpenAI-compatible server over HTTP, which answers at once with a
   small valid extraction built from the request's own chunks. Calls and tokens (the server's
   `usage`, as stored with each answer) are counted per window kind: extraction windows are
   what traffic amortises, reflections are per complex turn, capped per session.
2. The extractor's own overhead: the `extractor.windows` projection (its runner and the
   service's runner configuration) folding N ingest events into windows, as a ratio to raw
   JetStream pull + ack of the same messages in the same run.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from habitus.bus import EventPublisher
from habitus.events import Event
from habitus.events.ingest import TurnRecorded
from habitus.llm import LlmSettings
from habitus.projection import ProjectionRunner
from habitus.service.migrations import migrate
from habitus.subjects import INGEST_ROOT
from habitus.telemetry.gc_tuning import tune_gc
from services.extractor.main import build
from services.extractor.material import drafts_of, is_complex_turn
from services.extractor.projection import WindowsProjection
from services.extractor.settings import ExtractorSettings
from tests.bench.extractor_corpus import material
from tests.bench.test_bench_runner import raw_pull_ack
from tests.conftest import ServerUrls
from tests.integration.runner_support import publish
from tests.support.extraction import chunks_of, request_kind
from tests.support.factories import unique
from tests.support.llm_server import Answer, ScriptedLlm
from tests.support.services import running

pytestmark = pytest.mark.asyncio

#: (events a second per user, users, events per user)
LEVELS = [(1.0, 8, 50), (10.0, 8, 100), (300.0, 8, 250)]
WINDOW_SECONDS = 2.0
WINDOW_TOKENS = 1500  # the default
MAX_REFLECTIONS = 20  # the default
N = 20_000


def small_answer(body: dict[str, Any]) -> Answer:
    """A small valid answer citing the window's first chunk by its opening words."""
    chunks = chunks_of(body)
    first = chunks[0]
    quote = " ".join(first["text"].split()[:4])
    facet = {"class": "goal" if request_kind(body) == "extraction" else "style",
             "key": "current_focus", "value": "shipping the billing migration",
             "confidence": 0.6, "cue_family": "behavioral",
             "evidence": [{"chunk": first["id"], "quote": quote}]}
    if request_kind(body) == "reflection":
        return Answer(json={"observations": ["The user wants short, direct answers."],
                            "patterns": ["Asks about CI failures after deploys."],
                            "preferences": [facet]})
    return Answer(json={"summary": (
        "The user is migrating billing before March, works in a monorepo with Bun and Astro, "
        "prefers short answers and tables, and coordinates the release with Priya and Tom."),
        "facets": [facet]})


def complex_turns(streams: list[list[Event[Any]]]) -> tuple[int, int]:
    """Complex turns, and those of them a reflection is due for (at most MAX_REFLECTIONS
    per session)."""
    per_session: collections.Counter[tuple[str, str]] = collections.Counter()
    for events in streams:
        for e in events:
            if isinstance(e.payload, TurnRecorded) and is_complex_turn(e.payload):
                per_session[(e.user_id, e.payload.session_id)] += 1
    return (sum(per_session.values()),
            sum(min(n, MAX_REFLECTIONS) for n in per_session.values()))


def piece_count(streams: list[list[Event[Any]]]) -> int:
    return sum(len(drafts_of(e.payload, occurred_at=e.occurred_at))
               for events in streams for e in events)


async def paced(nc: Any, events: list[Event[Any]], rate: float) -> float:
    """Publish one user's events at `rate` a second (what is due every 20 ms, with its
    PubAcks); returns the rate reached."""
    publisher = EventPublisher(nc.jetstream())
    started = time.perf_counter()
    sent = 0
    while sent < len(events):
        due = min(len(events), int((time.perf_counter() - started) * rate) + 1)
        if due > sent:
            results = await publisher.publish_many(events[sent:due])
            assert not any(isinstance(r, Exception) for r in results)
            sent = due
        await asyncio.sleep(min(0.02, 1 / rate))
    elapsed = time.perf_counter() - started
    return (len(events) - 1) / elapsed if elapsed > 0 else float("inf")


async def one_row(pool: Any, sql: str, *args: Any) -> tuple[Any, ...]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, args)
        row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def settled(pool: Any, tenant: str, pieces: int, timeout: float = 300.0) -> None:
    """Every piece of material is in a closed window and every window is done."""
    deadline = time.monotonic() + timeout
    while True:
        seen, pending, still_open = await one_row(pool, """
            SELECT (SELECT coalesce(sum(jsonb_array_length(chunks)), 0) FROM extractor.windows
                     WHERE tenant_id = %s AND kind = 'extract'),
                   (SELECT count(*) FROM extractor.windows
                     WHERE tenant_id = %s AND state <> 'done'),
                   (SELECT count(*) FROM extractor.open_windows WHERE tenant_id = %s)""",
            tenant, tenant, tenant)
        if seen == pieces and pending == 0 and still_open == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{tenant}: {seen}/{pieces} pieces windowed, {pending} "
                                 f"windows pending, {still_open} open")
        await asyncio.sleep(0.2)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def run_level(nc: Any, pool: Any, llm: ScriptedLlm, rate: float, users: int,
                    per_user: int) -> dict[str, Any]:
    tenant = unique("bench")
    streams = material(tenant, users, per_user)
    events = sum(len(s) for s in streams)
    pieces = piece_count(streams)
    requests_before = len(llm.requests)
    tokens_before = (metric("habitus_llm_tokens_total", service="extractor", direction="in"),
                     metric("habitus_llm_tokens_total", service="extractor", direction="out"))
    started = time.perf_counter()
    rates = await asyncio.gather(*(paced(nc, s, rate) for s in streams))
    published = time.perf_counter() - started
    await settled(pool, tenant, pieces)

    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT w.kind, count(*), sum(e.tokens_in), sum(e.tokens_out), sum(w.tokens),
                      sum(jsonb_array_length(w.chunks))
               FROM extractor.windows w JOIN extractor.extractions e USING
                    (tenant_id, user_id, window_id)
               WHERE w.tenant_id = %s GROUP BY w.kind""", (tenant,))
        by_kind = {k: (int(n), int(i), int(o), int(t), int(p))
                   for k, n, i, o, t, p in await cur.fetchall()}
        cur = await conn.execute(
            """SELECT closed_by, count(*) FROM extractor.windows
               WHERE tenant_id = %s AND kind = 'extract' GROUP BY closed_by""", (tenant,))
        closed_by = {k: int(n) for k, n in await cur.fetchall()}
        cur = await conn.execute("SELECT count(*) FROM extractor.quarantine WHERE tenant_id = %s",
                                 (tenant,))
        quarantined = (await cur.fetchone() or (0,))[0]
    calls = len(llm.requests) - requests_before
    extract = by_kind.get("extract", (0, 0, 0, 0, 0))
    reflect = by_kind.get("reflect", (0, 0, 0, 0, 0))
    assert quarantined == 0  # the scripted answers are valid: nothing is refused
    assert calls == extract[0] + reflect[0]  # one request per window: no retries, no repeats
    complex_, due = complex_turns(streams)
    assert reflect[0] == due  # every complex turn, capped per session
    metric_in = metric("habitus_llm_tokens_total", service="extractor",
                       direction="in") - tokens_before[0]
    assert metric_in == extract[1] + reflect[1]  # the client's count is the stored one

    def per_k(x: float) -> float:
        return round(1000 * x / events, 1)

    return {
        "rate_per_user": rate, "reached_per_user": round(min(rates), 1), "users": users,
        "events": events, "publish_s": round(published, 1),
        "extract_calls_per_1k": per_k(extract[0]),
        "extract_prompt_tokens_per_1k": round(per_k(extract[1])),
        "extract_completion_tokens_per_1k": round(per_k(extract[2])),
        "events_per_extract_window": round(events / max(1, extract[0]), 2),
        "material_tokens_per_extract_call": round(extract[3] / max(1, extract[0])),
        "prompt_tokens_per_extract_call": round(extract[1] / max(1, extract[0])),
        "closed_by": dict(sorted(closed_by.items())),
        "complex_turns_per_1k": per_k(complex_), "reflect_calls_per_1k": per_k(reflect[0]),
        "reflect_prompt_tokens_per_1k": round(per_k(reflect[1])),
        "reflect_completion_tokens_per_1k": round(per_k(reflect[2])),
        "all_calls_per_1k": per_k(calls),
        "all_tokens_per_1k": round(per_k(extract[1] + extract[2] + reflect[1] + reflect[2])),
    }


async def test_cost_per_event_falls_with_traffic(servers: ServerUrls, nc: Any, pool: Any,
                                                 record: Any) -> None:
    migrate(servers.database)
    async with ScriptedLlm(responder=small_answer) as llm:
        config = ExtractorSettings(
            window_tokens=WINDOW_TOKENS, window_seconds=WINDOW_SECONDS, sweep_seconds=0.2,
            max_reflections_per_session=MAX_REFLECTIONS,
            llm=LlmSettings(base_url=llm.url, model="scripted-model",
                            daily_calls_per_tenant=0, daily_tokens_per_tenant=0))
        async with running(build(config), servers.settings()):
            levels = [await run_level(nc, pool, llm, *level) for level in LEVELS]
    for figures in levels:
        record("extractor_cost", window_seconds=WINDOW_SECONDS, window_tokens=WINDOW_TOKENS,
               **figures)
    low, high = levels[0], levels[-1]
    # the point of windows: at high traffic one call covers many events
    assert high["extract_calls_per_1k"] < low["extract_calls_per_1k"]
    assert high["extract_prompt_tokens_per_1k"] < low["extract_prompt_tokens_per_1k"]


async def test_windows_projection_ratio(servers: ServerUrls, nc: Any, pool: Any, record: Any
                                        ) -> None:
    migrate(servers.database)
    tenant = unique("bench")
    streams = material(tenant, 50, N // 50, seed=7)
    # the stream holds the users' material interleaved, as they produce it at once
    events = [e for batch in zip(*streams, strict=True) for e in batch]
    pieces = piece_count(streams)
    for i in range(0, N, 2000):
        await publish(nc, events[i : i + 2000])
    subject = f"{INGEST_ROOT}.*.{tenant}.>"
    before = await raw_pull_ack(nc, subject, N)

    settings = ExtractorSettings()  # production windows: 1,500 tokens, 300 s
    projection = WindowsProjection(settings)
    # this run's events only (the shape of the service)
    projection.filter_subjects = WindowsProjection.subjects(tenant)  # type: ignore[misc]
    config = build(settings).runner_config
    runner = ProjectionRunner(projection, nc, pool, config=config)
    tune_gc()  # as ServiceHost does once a service has started
    started = time.perf_counter()
    await runner.run_until_caught_up(timeout=600)
    rate = N / (time.perf_counter() - started)
    baseline = (before + await raw_pull_ack(nc, subject, N)) / 2

    closed, windowed, still_open = await one_row(pool, """
        SELECT (SELECT count(*) FROM extractor.windows WHERE tenant_id = %s AND kind = 'extract'),
               (SELECT coalesce(sum(jsonb_array_length(chunks)), 0) FROM extractor.windows
                 WHERE tenant_id = %s AND kind = 'extract')
             + (SELECT coalesce(sum(jsonb_array_length(chunks)), 0) FROM extractor.open_windows
                 WHERE tenant_id = %s),
               (SELECT count(*) FROM extractor.open_windows WHERE tenant_id = %s)""",
        tenant, tenant, tenant, tenant)
    assert windowed == pieces  # every piece of material is in exactly one window
    record("extractor_windows_fold", events=N, batch=config.batch_size,
           windows_closed=closed, windows_open=still_open,
           raw_pull_ack_per_s=round(baseline), fold_per_s=round(rate),
           ratio=round(rate / baseline, 3))
