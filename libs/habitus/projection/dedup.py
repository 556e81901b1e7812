"""First applications: an event id applies to a projection once, ever.

The ids a projection applied are recorded in the batch transaction
(`CheckpointStore.claim_unapplied`), so recording and applying commit or roll back together. A
copy re-published past the stream's duplicate window (a new stream sequence carrying an event
id already applied), or the same event twice in one batch, is acknowledged and skipped.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncCursor

from habitus.projection.checkpoints import AppliedKey, CheckpointStore
from habitus.projection.decode import Item


async def first_applications(store: CheckpointStore, cur: AsyncCursor[Any], projection: str,
                             items: list[Item]) -> list[Item]:
    """The items whose event id this projection never applied: the others are copies
    re-published after the stream's duplicate window (or twice in this batch)."""
    keys: dict[tuple[str, str, str], AppliedKey] = {}
    for item in items:
        assert item.delivered is not None
        event = item.delivered.event
        ident = (event.tenant_id, event.user_id, event.event_id)
        if ident not in keys:
            keys[ident] = AppliedKey(*ident, item.seq)
    fresh = await store.claim_unapplied(cur, projection, list(keys.values()))
    return [i for i in items if i.seq in fresh]
