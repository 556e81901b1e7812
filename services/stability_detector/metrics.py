"""The stability detector's `habitus_learning_*` metrics: the cache's facets by state and
class (counted every few seconds, not per scrape) and how long a user's rebuild takes."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from psycopg import AsyncCursor

from habitus.events.domain import FacetClass
from habitus.telemetry.metrics import registry
from services.stability_detector import store
from services.stability_detector.scoring import ACTIVE, CANDIDATE, FORGOTTEN, PROVISIONAL

FACETS = Gauge(
    "habitus_learning_facets",
    "Facets in the learning cache, by state (candidate, provisional, active) and class; "
    "forgotten ones are not counted. Refreshed every few seconds.",
    ["state", "class"], registry=registry,
)
REBUILD_SECONDS = Histogram(
    "habitus_learning_rebuild_duration_seconds",
    "Time to rebuild one user's cache (load evidence and commands, fold, save), by trigger "
    "(candidates, command, requested, periodic).",
    ["trigger"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=registry,
)
SUMMARIES = Counter(
    "habitus_learning_summaries",
    "Users' evidence summaries brought to a rebuild's time, by how: folded (only the evidence "
    "logged since the last rebuild read) or from_log (every piece read again: a user's first "
    "rebuild, a reset, evidence applied out of order).",
    ["how"], registry=registry,
)
FOLDED_EVIDENCE = Counter(
    "habitus_learning_folded_evidence",
    "Pieces of evidence read to fold into users' summaries (the new ones and those that "
    "waited for their time), not counting summaries made from the log.",
    registry=registry,
)

STATES = (CANDIDATE, PROVISIONAL, ACTIVE)


async def refresh_facets(cur: AsyncCursor[Any]) -> None:
    """One `GROUP BY` over the facets; every (state, class) pair is set, zeros included."""
    await cur.execute(
        f"SELECT state, class, count(*) FROM {store.FACETS} "
        "WHERE user_state <> %s GROUP BY state, class", (FORGOTTEN,))
    counts = {(str(state), str(cls)): int(n) for state, cls, n in await cur.fetchall()}
    for state in STATES:
        for cls in FacetClass:
            FACETS.labels(state, cls.value).set(counts.get((state, cls.value), 0))
