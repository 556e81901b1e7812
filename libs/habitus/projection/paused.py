"""A projection of a disabled service: it reads what the projection reads and folds none of it.

A disabled service (the extractor with no model configured) builds no views, but its
checkpoints stay where they were when it last ran, and every command that waits for the
readers of a user's events (an erasure's settle, above all) would wait for them until its
deadline. Passing over the events moves those checkpoints instead: the waits see the views
caught up, and a service enabled again starts from then rather than from a backlog of what
arrived while it was off.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.projection.base import ApplyContext, Delivered, Projection


def paused(projection: Projection) -> Projection:
    """`projection` under its own name, consumer and checkpoint, applying nothing."""
    cls = type(projection)
    # A subclass without its own `handlers` keeps everything derived from the original's.
    passing = type(f"Paused{cls.__name__}", (cls,), {
        "apply_batch": _apply_nothing,
        "after_commit": _after_nothing,
        "__module__": __name__,
    })
    twin = copy.copy(projection)
    twin.__class__ = passing
    return twin


async def _apply_nothing(self: Projection, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
    return None


async def _after_nothing(self: Projection, batch: Sequence[Delivered]) -> None:
    return None
