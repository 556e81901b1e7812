"""`admin.*`: what the platform asks of Habitus about a user as a whole (erasure), and about
the deployment (its partitions)."""

from __future__ import annotations

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract.admin import (
    EraseUser,
    Partitions,
    PartitionsQuery,
    PartitionStatus,
    UserErasedResult,
)
from habitus.contract.rpc import METHODS
from habitus.service.context import ServiceContext
from habitus.service.erasure import erase_user
from habitus.service.partitions import states


class AdminRpc:
    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.registry = RpcRegistry()
        self.registry.implement(METHODS["admin.erase_user"])(self.erase_user)
        self.registry.implement(METHODS["admin.partitions"])(self.partitions)

    async def erase_user(self, p: EraseUser, rc: RpcContext) -> UserErasedResult:
        ctx = self.ctx
        budget = ctx.settings.rpc_timeout_seconds * METHODS["admin.erase_user"].timeout_factor
        done = await erase_user(ctx.commands, ctx.js, ctx.commands.topology, rc.tenant_id,
                                p.user_id, p.reason, producer="gateway.admin",
                                budget=budget * 0.9)  # the answer must beat the caller's wait
        return UserErasedResult(user_id=p.user_id, tombstone_seq=done.tombstone_seq,
                                projections=done.projections,
                                purged_messages=done.purged_messages)

    async def partitions(self, p: PartitionsQuery, rc: RpcContext) -> Partitions:
        ctx = self.ctx
        async with ctx.pool.connection() as conn:
            await conn.set_autocommit(True)
            try:
                found = await states(ctx.js, conn, p.projections)
            except LookupError as exc:
                raise RpcError("invalid_argument", str(exc)) from None
            finally:
                await conn.set_autocommit(False)
        return Partitions(partitions=[PartitionStatus(**x.as_dict()) for x in found])
