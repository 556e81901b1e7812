"""Acknowledging a batch: one ack for all of it, and only after its transaction committed.

* **Ack-all.** The consumer uses `AckPolicy.ALL` (see `habitus.projection.consumer`):
  acknowledging the latest delivery of a batch acknowledges every delivery before it (all
  applied, or at or below the checkpoint). Copies of one sequence that arrived in the same batch
  count too: the latest delivery is the latest of any of them.
* **A lost ack is harmless.** Failing to acknowledge only means a redelivery, which the
  checkpoint recognises and acknowledges without applying it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from habitus.bus.pull import delivery_info
from habitus.projection.decode import Item


async def ack_all(items: Sequence[Item]) -> None:
    """Ack-all: the latest delivery of the batch acknowledges every delivery before it
    (all of them applied, or at or below the checkpoint)."""
    latest = max(((item.consumer_seq, item.msg) for item in items), default=None,
                 key=lambda pair: pair[0])
    copies = [(delivery_info(m).consumer_seq, m) for item in items for m in item.copies]
    if copies:
        latest = max([*([latest] if latest else []), *copies], key=lambda pair: pair[0])
    if latest is not None:
        with contextlib.suppress(Exception):  # a lost ack is a harmless redelivery
            await latest[1].ack()
