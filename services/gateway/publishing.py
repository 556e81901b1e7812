"""Publishing a batch of checked items, and what to tell the client about each.

The answer must be true for every item, because clients act on it: "accepted" and "duplicate"
are stored; "not_stored" certainly is not (retry it); "not_confirmed" was sent but its ack was
lost (it may be stored: retry with the same event_id, which is safe); "conflict" means the
event_id is already stored with a different content (never retry as is).

Conflicts are found at publish time: JetStream reports a re-published id as a duplicate and
its ack carries the sequence of the stored copy, which is read back (direct get) and compared
on type, user and payload (not occurred_at, which the gateway fills). So a conflict can only be
told while the stream still deduplicates the id (its duplicate window) and holds the original;
past that the stream cannot tell, and the projections' own dedup keeps the first copy. Because
a conflict is known only once the batch was published, the other items of an all-or-nothing
batch are stored anyway: the answer is 409 with each item's status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext

from habitus.bus.publisher import EventPublisher, PublishResult, failure_kind, msg_id
from habitus.crypto.keyring import KeyMissing, Shredded
from habitus.crypto.sealing import open_event
from habitus.events import CATALOG, Event

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Published:
    status: str  # accepted | duplicate | conflict | not_stored | not_confirmed | too_large
    result: PublishResult | None = None
    error: str | None = None
    permanent: bool = False


async def publish_events(publisher: EventPublisher, js: JetStreamContext,
                         events: Sequence[Event[Any]]) -> list[Published]:
    outcomes: list[Published] = []
    for event, res in zip(events, await publisher.publish_many(events), strict=True):
        if isinstance(res, PublishResult):
            if res.duplicate and await _differs_from_stored(js, event, res):
                outcomes.append(Published(
                    "conflict", res, permanent=True,
                    error=f"event_id {event.event_id} is already stored with a different "
                          "type or payload; send a new event_id for a different event"))
            else:
                outcomes.append(Published("duplicate" if res.duplicate else "accepted", res))
            continue
        kind = failure_kind(res)
        detail = f"{type(res).__name__}: {res}" if str(res) else type(res).__name__
        if kind == "too_large":
            outcomes.append(Published("too_large", permanent=True,
                                      error="larger than the bus's maximum message size"))
        elif kind == "not_confirmed":
            outcomes.append(Published("not_confirmed", error=f"sent but not confirmed ({detail});"
                                      " retrying with the same event_id is safe"))
        elif kind == "refused":
            log.error("the stream refused an event", extra={"error": detail})
            outcomes.append(Published("not_stored", permanent=True,
                                      error=f"the stream refused it ({detail})"))
        else:
            outcomes.append(Published("not_stored", error=f"not stored ({detail}); retrying is "
                                                          "safe"))
    return outcomes


async def _differs_from_stored(js: JetStreamContext, event: Event[Any],
                               res: PublishResult) -> bool:
    """Is the stored copy of this id a different event? False when the stream cannot tell
    (the copy expired, or the read failed): a duplicate is the safe answer then, because the
    stream did not store this one either way."""
    try:
        stored = await js.get_msg(res.stream, res.seq, direct=True)
    except Exception as exc:
        log.warning("could not read the stored copy of a duplicate",
                    extra={"stream": res.stream, "seq": res.seq, "error": repr(exc)})
        return False
    if (stored.headers or {}).get("Nats-Msg-Id") != msg_id(event) or not stored.data:
        return False  # the sequence holds something else now: cannot tell
    try:
        doc = (open_event(stored.data, CATALOG.keyring) if CATALOG.keyring is not None
               else json.loads(stored.data))
    except (Shredded, KeyMissing):
        return False  # the user was erased in between, or the key store is amiss: cannot tell
    except ValueError:
        return True
    mine = json.loads(event.to_json())
    return bool((doc.get("type"), doc.get("user_id"), doc.get("payload"))
                != (mine["type"], mine["user_id"], mine["payload"]))
