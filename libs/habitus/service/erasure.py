"""Erasing a user: one command through the same flow as every other.

0. Shred: the user's data keys are destroyed (habitus.crypto), so every sealed copy of their
   events, wherever it is, cannot be read any more; done again at the end for a key made for
   an event that arrived meanwhile.
1. Settle: every projection first applies what the streams hold of the user, so nothing of the
   user arrives at a view after it was erased.
2. Publish `UserErased` and wait until every service's erasure projection applied it: each
   dropped the user's rows, applied ids, cache keys and mirror files in that step.
3. Purge the user's raw messages from the ingest stream and its dead letters, and its domain
   events up to the tombstone, which stays: a replay from sequence 1 erases the user again.

The whole of it runs twice: what was in flight for the user while the first pass ran (a
consequence published late, an ingest event sent meanwhile) is applied by the second settle and
erased by the second tombstone. Events for the user sent after that are new data: the platform
stops sending before it asks, and erasure can be run again (it is idempotent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext

from habitus.bus.streams import DLQ, EVENTS, INGEST
from habitus.crypto.announce import KEYS_DESTROYED, destroyed
from habitus.events import CATALOG
from habitus.events.domain import UserErased
from habitus.service.command import Commands
from habitus.subjects import DLQ_ROOT, EVENT_ROOT, INGEST_ROOT, published_filter, user_filter
from habitus.topology import Topology


@dataclass(frozen=True)
class Erased:
    tombstone_seq: int
    projections: list[str]
    purged_messages: int


def user_filters(tenant_id: str, user_id: str) -> list[tuple[str, str]]:
    """Every subject of the user, by stream: as the streams store them now (with the partition
    tokens), as they were stored before the tokens, and in the DLQ (which has none)."""
    return [(INGEST, user_filter(INGEST_ROOT, "*", tenant_id, user_id)),
            (INGEST, published_filter(INGEST_ROOT, "*", tenant_id, user_id)),
            (EVENTS, user_filter(EVENT_ROOT, "*", tenant_id, user_id)),
            (EVENTS, published_filter(EVENT_ROOT, "*", tenant_id, user_id)),
            (DLQ, published_filter(DLQ_ROOT, "*", tenant_id, user_id))]


async def count(js: JetStreamContext, stream: str, subject: str) -> int:
    info = await js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def shred(nc: Any, tenant_id: str, user_id: str) -> bool:
    """Destroy the user's data keys (none when events are not sealed in this deployment) and
    tell every process to drop its cached copy (habitus.crypto.announce)."""
    keyring = CATALOG.keyring
    if keyring is None:
        return False
    done = keyring.destroy(tenant_id, user_id)
    await nc.publish(KEYS_DESTROYED, destroyed(tenant_id, user_id))
    await nc.flush(timeout=5)
    return done


async def erase_user(commands: Commands, js: JetStreamContext, topology: Topology,
                     tenant_id: str, user_id: str, reason: str | None, producer: str,
                     budget: float) -> Erased:
    """Settle, erase, and once more: what was in flight for the user while the first pass ran
    (a consequence published late, an ingest event sent meanwhile) is applied by the second
    settle and erased by the second tombstone. Then purge up to the last tombstone, which stays.
    One `budget` (seconds) for all of it."""
    deadline = time.monotonic() + budget
    # The user's data key goes first: from here every copy of what they said, in the stream
    # files, the dead letters, a backup made before, is unreadable (crypto-shredding); what
    # is still in flight is passed over by every consumer as shredded.
    await shred(js._nc, tenant_id, user_id)
    applied: list[str] = []
    tombstone = None
    passes = 2
    for _ in range(passes):
        await commands.settle(tenant_id, user_id, timeout=deadline - time.monotonic())
        event = CATALOG.new(UserErased(reason=reason), tenant_id=tenant_id, user_id=user_id,
                            producer=producer)
        applied = []
        tombstone = await commands.run(event, absent_ok=True, applied=applied,
                                       timeout=deadline - time.monotonic())
    assert tombstone is not None
    purged = 0
    for stream, subject in user_filters(tenant_id, user_id):
        before = await count(js, stream, subject)
        if not before:
            continue
        if stream == EVENTS:  # up to, not including, the tombstone
            await js.purge_stream(stream, subject=subject, seq=tombstone.seq)
        else:
            await js.purge_stream(stream, subject=subject)
        purged += before - await count(js, stream, subject)
    # an event that arrived during the erasure was sealed with a key made for it: that key
    # covered only what was just purged, and goes too
    await shred(js._nc, tenant_id, user_id)
    # this erasure's own earlier tombstones are not the user's messages
    return Erased(tombstone.seq, sorted(applied), max(0, purged - (passes - 1)))
