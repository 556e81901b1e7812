"""Dead-lettering an item of a batch: to HABITUS_DLQ, and on record beside the checkpoint.

* **Sent before the checkpoint passes it.** The dead letter (see `habitus.projection.dlq`) is
  published before the transaction that moves the checkpoint past the event commits: a crash in
  between sends it again, and the DLQ's own Nats-Msg-Id drops the copy.
* **Recorded beside the checkpoint.** Every dead letter is also recorded in the batch
  transaction (`CheckpointStore.record_dead_letter`), with whose event it was, so a command
  waiting on its event learns that it was given up on.
"""

from __future__ import annotations

import logging
from typing import Any

from nats.js import JetStreamContext
from psycopg import AsyncCursor

from habitus.crypto.columns import COLUMNS
from habitus.projection.base import Projection
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.decode import Item, owner_of
from habitus.projection.dlq import DeadLetter, send_to_dlq
from habitus.telemetry import metrics

log = logging.getLogger(__name__)


class DeadLetters:
    """Dead-letters items of one projection's batches."""

    def __init__(self, projection: Projection, js: JetStreamContext, store: CheckpointStore):
        self.projection = projection
        self._js = js
        self._store = store
        self._label = projection.name

    async def send(self, item: Item, reason: str, detail: str, failed_attempts: int) -> None:
        """Publish the item to HABITUS_DLQ; `failed_attempts` are this runner's failed applies
        of it (the deliveries reported are the larger of those and the stream's count). The
        detail can quote the event, so its header is sealed with the user's key
        (`habitus dlq list` opens it; cut to 1,400 bytes first so the sealed value, base64 of
        them and a tag, fits the header's 2,000 characters)."""
        tenant_id, user_id = owner_of(item)
        sealed = (COLUMNS.seal(tenant_id, user_id, _cut(detail, 1400))
                  if tenant_id and user_id else detail)
        await send_to_dlq(
            self._js,
            DeadLetter(
                consumer=self.projection.durable,
                reason=reason,
                detail=sealed,
                stream=self.projection.stream,
                seq=item.seq,
                subject=item.msg.subject,
                deliveries=max(item.num_delivered, failed_attempts),
                data=item.msg.data,
            ),
        )
        metrics.DLQ.labels(self.projection.durable, reason).inc()
        # the why in the message itself too: a plain log (a test's captured log, a terminal)
        # shows the message only; of a user's event, only what names the error (the rest can
        # quote the event, and logs are files: `habitus dlq list` shows the whole detail)
        shown = detail[:300] if sealed is detail else detail.split(":", 1)[0][:100]
        log.error(
            "event sent to DLQ: %s (%s): %s", self._label, reason, shown,
            extra={"projection": self._label, "seq": item.seq, "reason": reason,
                   "detail": shown},
        )

    async def record(self, cur: AsyncCursor[Any], item: Item, reason: str, detail: str
                     ) -> None:
        """Record the dead letter beside the checkpoint, in the transaction of `cur`."""
        tenant_id, user_id = owner_of(item)
        event_id = item.delivered.event.event_id if item.delivered else None
        await self._store.record_dead_letter(cur, self._label, item.seq, event_id, reason,
                                             detail, tenant_id, user_id)


def _cut(text: str, size: int) -> str:
    """`text` cut to at most `size` bytes of UTF-8, on a character boundary."""
    return text.encode()[:size].decode(errors="ignore")
