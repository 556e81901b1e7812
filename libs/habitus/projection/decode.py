"""Decoding one batch of deliveries into items, one per stream sequence, in stream order.

* **Copies of one sequence.** A redelivery can arrive in the same batch as the first copy (it
  was sent again before the first was handled). Such copies ride on the first item
  (`Item.copies`): they are answered with it (see `habitus.projection.acks`), never applied
  twice.
* **Shredded events are passed over.** An event sealed with a key erasure destroyed cannot be
  read, by design: it is `shredded`, acknowledged and skipped like an event no handler wants,
  never dead-lettered (it is not bad; its user is gone).
* **An event whose key this process cannot find waits.** A key the store lacks though no
  erasure destroyed it (`KeyMissing`), or one wrapped by a KEK this process does not have
  (`KekError`), is this deployment's fault, not the event's: the item is `unavailable`, and the
  batch applies what comes before it and rewinds to it (see `habitus.projection.batch`), so
  nothing is dead-lettered while a key volume or a KEK is missing, and it applies once fixed.
* **Undecodable events are kept, never raised.** An event that fails validation, or whose
  upcaster raises, becomes an invalid item; it goes to HABITUS_DLQ at once (see
  `habitus.projection.dead_letters`), so one bad event never stalls the consumer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from habitus.bus.pull import Delivery, delivery_info
from habitus.crypto.kek import KekError
from habitus.crypto.keyring import KeyMissing, Shredded
from habitus.crypto.sealing import EnvelopeOpener
from habitus.events import Catalog, EventValidationError
from habitus.projection.base import Delivered
from habitus.subjects import parse_subject


@dataclass
class Item:
    """One stream sequence of a batch, decoded."""

    msg: Msg
    seq: int
    num_delivered: int
    num_pending: int
    consumer_seq: int
    delivered: Delivered | None = None
    invalid: str | None = None
    #: sealed with a key erasure destroyed: skipped (see the module docstring)
    shredded: bool = False
    #: sealed with a key this process cannot find (see the module docstring): why
    unavailable: str | None = None
    #: other deliveries of the same stream sequence in this batch (a redelivery that arrived
    #: before the first copy was handled): answered with the first, never applied twice
    copies: list[Msg] = field(default_factory=list)


def decode_batch(msgs: Sequence[Msg], catalog: Catalog) -> list[Item]:
    """One item per stream sequence, in stream order; an undecodable event is kept as
    invalid (it goes to the DLQ), never raised."""
    by_seq: dict[int, Item] = {}
    opener = catalog.opener()  # one per batch: the keys' memo checked against one clock read
    for msg in msgs:
        info = delivery_info(msg)
        if info.stream_seq in by_seq:
            by_seq[info.stream_seq].copies.append(msg)
        else:
            by_seq[info.stream_seq] = _item(msg, info, catalog, opener)
    return [by_seq[s] for s in sorted(by_seq)]


def _item(msg: Msg, info: Delivery, catalog: Catalog, opener: EnvelopeOpener | None) -> Item:
    item = Item(msg, info.stream_seq, info.num_delivered, info.num_pending, info.consumer_seq)
    try:
        event = catalog.decode_message(msg.data, msg.headers, opener)
        item.delivered = Delivered(event, item.seq, msg.subject, info.num_delivered,
                                   info.stored_at)
    except Shredded:
        item.shredded = True
    except (KeyMissing, KekError) as exc:
        item.unavailable = f"{type(exc).__name__}: {exc}"
    except EventValidationError as exc:
        item.invalid = str(exc)
    except Exception as exc:  # an upcaster's bug must not stall the consumer
        item.invalid = f"{type(exc).__name__}: {exc}"
    return item


def owner_of(item: Item) -> tuple[str | None, str | None]:
    """Whose event a delivery is: the event's own ids, else the subject's last two tokens (an
    event that could not be read still rode on its user's subject)."""
    if item.delivered is not None:
        return item.delivered.event.tenant_id, item.delivered.event.user_id
    try:
        parsed = parse_subject(item.msg.subject)
    except ValueError:
        return None, None
    return parsed.tenant_id, parsed.user_id


def owners_of(msgs: Sequence[Msg]) -> set[tuple[str, str]]:
    """(tenant, user) of each delivery, from its subject's tokens (no parse of the body), for
    reading their keys before the batch is decoded."""
    found = set()
    # a batch holds few users' subjects many times over: each distinct one is split once
    for subject in {msg.subject for msg in msgs}:
        tokens = subject.split(".")
        if len(tokens) in (6, 8):
            found.add((tokens[4], tokens[5]))
    return found
