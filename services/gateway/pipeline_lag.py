"""How many seconds the pipeline is behind, measured cheaply and straight from JetStream.

`habitus lag` counts sequences and reads checkpoints from Postgres; the gateway asks about once
a second, on the ingest path's behalf, so it asks only the bus: the durable consumers of each
stream (one consumer-list request a stream, every partition of every projection in it), and,
for a consumer with work left, the publish time of the first message after its ack floor on the
projection's subjects (a direct get per event type). Its age is the consumer's lag in seconds;
a projection's is its slowest partition's, and the pipeline's the slowest chain of projections
along the data flow (`backpressure.end_to_end`), what a sentence waits for end to end.

A partition's first message after its ack floor is looked for on the projection's subjects,
not on the partition's own (one get per event type, not one per type and slot): a message of
another partition may lie between the floor and the partition's first, so the age is that of
a message at least as old, an overestimate only by the gap between the two, which under a
backlog (the only time it matters) is a fraction of a second.

A consumer that delivered nothing within the activity window (the backpressure bound) is not
behind but stopped: its service is down or gone (a durable left by a removed service, a test's),
which the alerts report (HabitusProjectionStalled, HabitusServiceGone). Refusing ingest would
not bring it back, and JetStream keeps what arrives meanwhile, so a stopped consumer does not
count. Window = bound is what keeps the rule sound: events published after a consumer stopped
are younger than the time since, so a stopped consumer could only look `bound` behind once it
had been idle longer than the window.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.js.errors import NotFoundError

from habitus.service.registry import topology
from services.gateway.backpressure import PipelineLag, end_to_end


@dataclass(frozen=True, slots=True)
class Watched:
    """A projection's durable consumer, as the gateway watches it."""

    projection: str
    stream: str
    durable: str
    subjects: tuple[str, ...]
    #: the projections whose events this one reads (itself too, when it reads its own)
    upstream: tuple[str, ...] = ()


def watched_projections() -> list[Watched]:
    """Every installed projection's consumer (erasures included: a late erasure is lag too)."""
    flow = topology()
    out = []
    for p in flow.in_flow_order():
        out.append(Watched(p.name, p.stream, p.durable, tuple(p.filter_subjects()),
                           flow.upstream_of(p.name)))
    return out


def _epoch(moment: datetime.datetime | None) -> float | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


async def consumers_of(js: Any, streams: Sequence[str]) -> dict[str, Any]:
    """durable name -> its consumer info, for every consumer of `streams` (paged by the
    server's 256)."""
    out: dict[str, Any] = {}
    for stream in streams:
        offset = 0
        while True:
            page = await js.consumers_info(stream, offset=offset or None)
            for info in page:
                out[str(info.name)] = info
            if len(page) < 256:
                break
            offset += len(page)
    return out


def _partitions(w: Watched, consumers: dict[str, Any]) -> list[Any]:
    """The consumer infos of `w`'s partitions (its own name when it is whole)."""
    prefix = w.durable + "__p"
    return [info for name, info in consumers.items()
            if name == w.durable or name.startswith(prefix)]


async def _oldest_unapplied(js: Any, w: Watched, after_seq: int) -> float | None:
    """Publish time (epoch seconds) of the first message after `after_seq` on the consumer's
    subjects; None when there is none (it was purged or erased meanwhile)."""
    async def first(subject: str) -> tuple[int, float] | None:
        try:
            msg = await js.get_msg(w.stream, seq=after_seq + 1, subject=subject, next=True,
                                   direct=True)
        except NotFoundError:
            return None
        stamp = _epoch(msg.time)
        return None if stamp is None else (int(msg.seq or 0), stamp)

    found = [f for f in await asyncio.gather(*(first(s) for s in w.subjects)) if f is not None]
    return min(found)[1] if found else None


async def consumer_lag(js: Any, w: Watched, info: Any, *, now: float, active_within: float
                       ) -> float:
    """Seconds one consumer of the projection is behind (0: caught up, or stopped)."""
    if not (info.num_pending or info.num_ack_pending):
        return 0.0
    delivered = _epoch(info.delivered.last_active if info.delivered else None)
    if delivered is None or now - delivered > active_within:
        return 0.0  # stopped, not behind (see the module's docstring)
    floor = int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0
    oldest = await _oldest_unapplied(js, w, floor)
    return 0.0 if oldest is None else max(0.0, now - oldest)


async def projection_lag(js: Any, w: Watched, consumers: dict[str, Any], *, now: float,
                         active_within: float) -> float:
    """Seconds the projection is behind: its slowest partition's (0: caught up, stopped, or
    no consumer)."""
    lags = await asyncio.gather(*(consumer_lag(js, w, info, now=now,
                                               active_within=active_within)
                                  for info in _partitions(w, consumers)))
    return max(lags, default=0.0)


async def pipeline_lag(js: Any, watched: Sequence[Watched], *, now: float,
                       active_within: float) -> PipelineLag:
    """The slowest chain's lag. Raises what the bus raises (the caller decides what a failed
    measurement means)."""
    consumers = await consumers_of(js, sorted({w.stream for w in watched}))
    lags = await asyncio.gather(*(projection_lag(js, w, consumers, now=now,
                                                 active_within=active_within)
                                  for w in watched))
    return end_to_end(dict(zip((w.projection for w in watched), lags, strict=True)),
                      {w.projection: w.upstream for w in watched})
