"""Stream definitions, ensured idempotently at start.

Three streams with three different lives: raw personal text expires (INGEST), the event log is
kept and can only grow (EVENTS), failures are kept long enough for an operator (DLQ). A changed
setting (say the raw retention) is applied with an update, never by failing the start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from habitus.config import Settings
from habitus.subjects import DLQ_ROOT, EVENT_ROOT, INGEST_ROOT

log = logging.getLogger(__name__)

INGEST = "HABITUS_INGEST"
EVENTS = "HABITUS_EVENTS"
DLQ = "HABITUS_DLQ"
DAY = 86_400.0


def stream_for(kind: str) -> str:
    """`ingest` | `events` (the catalog's stream kinds) → the stream name."""
    return {"ingest": INGEST, "events": EVENTS, "dlq": DLQ}[kind]


def stream_configs(settings: Settings) -> list[StreamConfig]:
    storage = StorageType.FILE if settings.stream_storage == "file" else StorageType.MEMORY

    def stream(**specific: Any) -> StreamConfig:
        return StreamConfig(
            retention=RetentionPolicy.LIMITS,
            storage=storage,
            num_replicas=settings.stream_replicas,
            duplicate_window=settings.duplicate_window_seconds,
            allow_direct=True,
            **specific,
        )

    return [
        stream(
            name=INGEST,
            description="Raw agent reports; personal text, kept HABITUS_RAW_RETENTION_DAYS.",
            subjects=[f"{INGEST_ROOT}.>"],
            max_age=settings.raw_retention_days * DAY,
            discard=DiscardPolicy.OLD,
        ),
        stream(
            name=EVENTS,
            description="The Habitus event log: kept; only a user's erasure purges subjects.",
            subjects=[f"{EVENT_ROOT}.>"],
            max_age=0,
            discard=DiscardPolicy.NEW,
            deny_delete=True,
            deny_purge=False,
        ),
        stream(
            name=DLQ,
            description="Events a consumer could not apply, with reason headers.",
            subjects=[f"{DLQ_ROOT}.>"],
            max_age=settings.dlq_retention_days * DAY,
            discard=DiscardPolicy.OLD,
        ),
    ]


@dataclass(frozen=True, slots=True)
class EnsureResult:
    name: str
    action: str  # "created" | "updated" | "unchanged"


_COMPARED = (
    "subjects",
    "max_age",
    "discard",
    "deny_delete",
    "deny_purge",
    "duplicate_window",
    "num_replicas",
    "description",
    "allow_direct",
)


def _differs(current: StreamConfig, wanted: StreamConfig) -> list[str]:
    changed = []
    for name in _COMPARED:
        have, want = getattr(current, name), getattr(wanted, name)
        if isinstance(want, float) or isinstance(have, float):
            if abs(float(have or 0) - float(want or 0)) > 1e-6:
                changed.append(name)
        elif (have or None) != (want or None):
            changed.append(name)
    return changed


async def ensure_streams(js: JetStreamContext, settings: Settings) -> list[EnsureResult]:
    results = []
    for wanted in stream_configs(settings):
        assert wanted.name is not None
        try:
            info = await js.stream_info(wanted.name)
        except NotFoundError:
            await js.add_stream(wanted)
            results.append(EnsureResult(wanted.name, "created"))
            log.info("stream created", extra={"stream": wanted.name})
            continue
        if info.config.storage != wanted.storage:
            # Storage cannot be changed in place; keeping the existing stream loses nothing.
            log.warning(
                "stream storage differs from settings; keeping the existing stream",
                extra={"stream": wanted.name, "have": str(info.config.storage)},
            )
            wanted.storage = info.config.storage
        changed = _differs(info.config, wanted)
        if changed:
            await js.update_stream(wanted)
            results.append(EnsureResult(wanted.name, "updated"))
            log.info("stream updated", extra={"stream": wanted.name, "fields": changed})
        else:
            results.append(EnsureResult(wanted.name, "unchanged"))
    return results
