"""Stream definitions, ensured idempotently at start.

Three streams with three different lives: raw personal text expires (INGEST), the event log is
kept and can only grow (EVENTS), failures are kept long enough for an operator (DLQ). A changed
setting (say the raw retention) is applied with an update, never by failing the start.

INGEST and EVENTS store every message with its user and tenant slot appended to the subject (a
subject transform; `habitus.subjects`), so projections can be partitioned with subject filters
while publishers keep publishing on the documented subjects. A stream made before the transform
keeps its older messages as they were stored; the first sequence stored with the tokens is
recorded in the stream's metadata (`PARTITIONED_FROM`), and a partitioned consumer never starts
below it (`habitus.projection.layout`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import NotFoundError

from habitus.config import Settings
from habitus.subjects import DLQ_ROOT, EVENT_ROOT, INGEST_ROOT, partition_transform

log = logging.getLogger(__name__)

INGEST = "HABITUS_INGEST"
EVENTS = "HABITUS_EVENTS"
DLQ = "HABITUS_DLQ"
DAY = 86_400.0
#: stream metadata: the first sequence stored with the partition tokens ("1": all of them)
PARTITIONED_FROM = "habitus_partitioned_from"
PARTITIONED = (INGEST, EVENTS)


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

    def partitioned(root: str) -> dict[str, Any]:
        source, destination = partition_transform(root)
        return {"subjects": [source],
                "subject_transform": SubjectTransform(src=source, dest=destination)}

    return [
        stream(
            name=INGEST,
            description="Raw agent reports; personal text, kept HABITUS_RAW_RETENTION_DAYS.",
            **partitioned(INGEST_ROOT),
            max_age=settings.raw_retention_days * DAY,
            discard=DiscardPolicy.OLD,
        ),
        stream(
            name=EVENTS,
            description="The Habitus event log: kept; only a user's erasure purges subjects.",
            **partitioned(EVENT_ROOT),
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
    "subject_transform",
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


def _transform(config: StreamConfig) -> tuple[str, str] | None:
    t = config.subject_transform
    return None if t is None else (str(t.src), str(t.dest))


def partitioned_from(config: StreamConfig) -> int:
    """The first sequence stored with the partition tokens (1 for a stream that always had
    them; for a stream without the transform, past its end: nothing is partitioned)."""
    if config.subject_transform is None:
        return 2**63 - 1
    return int((config.metadata or {}).get(PARTITIONED_FROM, "1"))


async def _start_partitioning(js: JetStreamContext, wanted: StreamConfig,
                              metadata: dict[str, str], last_before: int) -> None:
    """Add the partition transform to a stream made without it, and record from which
    sequence its messages carry the tokens: publishes racing the update may still be stored
    without them, so the first one stored with them is looked up rather than assumed."""
    wanted.metadata = {**metadata, PARTITIONED_FROM: str(last_before + 1)}
    await js.update_stream(wanted)
    info = await js.stream_info(str(wanted.name))
    first = int(info.state.last_seq or 0) + 1
    for seq in range(last_before + 1, first):
        try:
            msg = await js.get_msg(str(wanted.name), seq)
        except NotFoundError:
            continue
        if str(msg.subject).count(".") == 7:
            first = seq
            break
    if first != last_before + 1:
        wanted.metadata = {**metadata, PARTITIONED_FROM: str(first)}
        await js.update_stream(wanted)
    log.info("stream partitioned", extra={"stream": wanted.name, "from_seq": first})


async def ensure_streams(js: JetStreamContext, settings: Settings) -> list[EnsureResult]:
    results = []
    for wanted in stream_configs(settings):
        assert wanted.name is not None
        try:
            info = await js.stream_info(wanted.name)
        except NotFoundError:
            if wanted.subject_transform is not None:
                wanted.metadata = {PARTITIONED_FROM: "1"}
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
        if wanted.subject_transform is not None:
            kept = {k: v for k, v in (info.config.metadata or {}).items()
                    if not k.startswith("_nats")}
            if _transform(info.config) != _transform(wanted):
                await _start_partitioning(js, wanted, kept, int(info.state.last_seq or 0))
                results.append(EnsureResult(wanted.name, "updated"))
                continue
            wanted.metadata = {PARTITIONED_FROM: "1", **kept}
        changed = _differs(info.config, wanted)
        if changed:
            await js.update_stream(wanted)
            results.append(EnsureResult(wanted.name, "updated"))
            log.info("stream updated", extra={"stream": wanted.name, "fields": changed})
        else:
            results.append(EnsureResult(wanted.name, "unchanged"))
    return results
