"""Erasing a user, as a projection: every service that keeps users' data runs one.

`UserErased` is a domain event; a service whose projections read the ingest stream cannot see
it in their own order, so each service gets one more projection, `<schema>.erasure`, that reads
`UserErased` and, in one transaction, has every projection of the service delete the user's rows
(`Projection.erase_user`), drops the user's applied-event ids, and deletes what the projections
keep outside Postgres (caches, mirror files) before the checkpoint moves: a command waiting for
that checkpoint answers only once all of it is done. The erasure's own id goes with the user's
(no row of the user is left); a copy of it applied again erases nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from psycopg import AsyncCursor

from habitus.events.domain import UserErased
from habitus.projection.base import ApplyContext, Delivered, Handler, Projection


def erased(batch: Sequence[Delivered]) -> dict[tuple[str, str], int]:
    """Each erased user with the sequence of (the last of) their erasure in the batch."""
    return {(d.event.tenant_id, d.event.user_id): d.seq for d in batch}


class ErasureProjection(Projection):
    """Subclassed per service by `erasure_for` (name and schema are the service's)."""

    erases: ClassVar[tuple[type[Projection], ...]] = ()

    def __init__(self, projections: Sequence[Projection]):
        self.projections = list(projections)

    async def on_erased(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        from habitus.projection.checkpoints import CheckpointStore

        checkpoints = CheckpointStore(self.schema)
        users = erased(run)
        for tenant_id, user_id in sorted(users):
            for projection in self.projections:
                await projection.erase_user(cur, tenant_id, user_id)
            await checkpoints.forget_user(cur, tenant_id, user_id)
        for projection in self.projections:
            await projection.after_erase(users, committed=False)

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        # Again once committed: a read racing the erasure may have refilled a cache from the
        # rows it was deleting.
        users = erased(batch)
        for projection in self.projections:
            await projection.after_erase(users, committed=True)


_handler: Handler = ErasureProjection.on_erased


def erasure_for(schema: str, erases: Sequence[type[Projection]]) -> type[ErasureProjection]:
    """The erasure projection of the service owning `schema`."""
    return type(f"Erasure_{schema}", (ErasureProjection,), {
        "name": f"{schema}.erasure",
        "schema": schema,
        "handlers": {UserErased: _handler},
        "erases": tuple(erases),
        "__module__": __name__,
    })
