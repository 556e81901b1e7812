"""Consequences of a batch: the events a projection emits, and its after-commit hook.

* **Consequences with the change.** Events the projection emits while applying are published,
  and acknowledged by the stream, before the batch commits: a failed publish fails the batch,
  so a change is never committed without its consequences. Those of events at or below
  `emitted_seq` were published before a replay and are not published again (the projection
  sees `ApplyContext.suppress_through`).
* **After commit is best effort.** `Projection.after_commit` runs once the batch committed; its
  failure is logged and changes nothing about the batch.
"""

from __future__ import annotations

import logging

from habitus.bus.publisher import EventPublisher
from habitus.projection.base import ApplyContext, Delivered, Projection

log = logging.getLogger(__name__)


async def publish_emitted(publisher: EventPublisher, ctx: ApplyContext) -> None:
    """Publish what the projection emitted; raises the first failure (the batch fails)."""
    if not ctx.emitted:
        return
    results = await publisher.publish_many(ctx.emitted)
    for result in results:
        if isinstance(result, Exception):
            raise result


async def after_commit(projection: Projection, delivered: list[Delivered]) -> None:
    """Run the projection's after-commit hook on what was applied; never raises."""
    if not delivered:
        return
    try:
        await projection.after_commit(delivered)
    except Exception:
        log.exception("after_commit failed", extra={"projection": projection.name})
