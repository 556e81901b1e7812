"""The extractor's `habitus_extractor_*` metrics (the LLM calls themselves are the client's
`habitus_llm_*`)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge
from psycopg import AsyncCursor

from habitus.telemetry.metrics import registry
from services.extractor import store

WINDOWS = Counter(
    "habitus_extractor_windows_total",
    "Windows the worker handled, by kind (extract, reflect) and outcome: extracted (the model "
    "answered), reused (a stored answer), failed (retried later), budget (waits for the "
    "tenant's budget), erased (the user was erased meanwhile).",
    ["kind", "outcome"], registry=registry,
)
QUARANTINED = Counter(
    "habitus_extractor_quarantined_total",
    "Facets (or whole outputs) validation refused, by reason.",
    ["reason"], registry=registry,
)
CANDIDATES = Counter(
    "habitus_extractor_candidates_total",
    "CandidateEmitted events published, by window kind.",
    ["kind"], registry=registry,
)
BACKLOG = Gauge(
    "habitus_extractor_windows_backlog",
    "Closed windows not yet done, by state (ready, waiting).",
    ["state"], registry=registry,
)


async def refresh_backlog(cur: AsyncCursor[Any]) -> None:
    await cur.execute(
        f"SELECT state, count(*) FROM {store.WINDOWS} WHERE state <> 'done' GROUP BY state")
    counts = {state: int(n) for state, n in await cur.fetchall()}
    for state in ("ready", "waiting"):
        BACKLOG.labels(state).set(counts.get(state, 0))
