"""The habits service's `habitus_habits_*` metrics (its judge and Analyze calls to the model are
the LLM client's `habitus_llm_*`)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from psycopg import AsyncCursor

from habitus.events.domain import HabitStatus
from habitus.telemetry.metrics import registry
from services.habits import store

CAPTURED = Counter(
    "habitus_habits_observations_captured_total",
    "Completed turns stored as redacted observations.", registry=registry)
NOT_CAPTURED = Counter(
    "habitus_habits_observations_skipped_total",
    "Turns not captured, by reason: error, aborted, truncated (how the turn ended), sensitive "
    "(text still looked sensitive after redaction).", ["reason"], registry=registry)
EXPIRED = Counter(
    "habitus_habits_observations_expired_total",
    "Observations deleted at the end of their retention.", registry=registry)
TRANSITIONS = Counter(
    "habitus_habits_transitions_total",
    "Changes the ledger applied, by event type.", ["type"], registry=registry)
BATCHES = Counter(
    "habitus_habits_analyze_batches_total",
    "Analyze batches, by outcome: committed (the model answered), reused (a stored answer), "
    "failed (the watermark stays; retried on the next run).", ["outcome"], registry=registry)
PROPOSALS = Counter(
    "habitus_habits_proposals_total",
    "What Analyze did with each proposal: suggested, evidence (a known habit seen again), "
    "quarantined, contradiction (an active habit made dormant).", ["outcome"],
    registry=registry)
SELECTIONS = Counter(
    "habitus_habits_selections_total",
    "habits.select answers, by outcome: steered (habits injected), none (the judge chose "
    "none), no_candidates, invalid_judgment (the judge's answer broke the rules: no guidance), "
    "unavailable (embedder or judge failed: no guidance), drift (a chosen habit changed "
    "before use: no guidance).", ["outcome"], registry=registry)
SELECT_SECONDS = Histogram(
    "habitus_habits_select_seconds",
    "habits.select latency, judge call included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20), registry=registry)
HABITS = Gauge(
    "habitus_habits",
    "Habits in the ledger, by status. Refreshed every few seconds.", ["status"],
    registry=registry)
REVIEW_QUEUE = Gauge(
    "habitus_habits_review_queue",
    "Candidate habits waiting for a person's review (what habits.list_review numbers). "
    "Refreshed every few seconds.", registry=registry)


async def refresh_habits(cur: AsyncCursor[Any]) -> None:
    """One `GROUP BY` over the ledger; every status is set, zeros included."""
    await cur.execute(f"SELECT status, count(*) FROM {store.HABITS} GROUP BY status")
    counts = {str(status): int(n) for status, n in await cur.fetchall()}
    for status in HabitStatus:
        HABITS.labels(status.value).set(counts.get(status.value, 0))
    REVIEW_QUEUE.set(counts.get(HabitStatus.CANDIDATE.value, 0))
