"""`extraction.*`: what the extractor made of a user's material, and re-extraction.

Reads come from the extractor's tables. `extraction.reextract` is a command: the request becomes
a `ReextractionRequested`, answered once `extractor.requests` applied it, with the count of
windows it covers that have no answer for the current prompt yet; the worker queues them.
"""

from __future__ import annotations

from collections.abc import Callable

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract import extractor as x
from habitus.contract.rpc import METHODS
from habitus.events.domain import ReextractionRequested
from habitus.ids import TENANT_WIDE
from habitus.service.context import ServiceContext
from services.extractor import store
from services.extractor.prompts import EXTRACT_VERSION

PRODUCER = "extractor.rpc"


class ExtractorRpc:
    def __init__(self, ctx: ServiceContext, *, disabled: str | None,
                 wake: Callable[[], None] | None = None):
        self.ctx = ctx
        self.disabled = disabled
        self._wake = wake
        self.registry = RpcRegistry()
        for name, handler in (
            ("extraction.status", self.status),
            ("extraction.quarantine", self.quarantine),
            ("extraction.reextract", self.reextract),
        ):
            self.registry.implement(METHODS[name])(handler)

    async def status(self, p: x.UserParams, rc: RpcContext) -> x.Status:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            windows = await store.window_counts(cur, rc.tenant_id, p.user_id)
            error = await store.last_error(cur, rc.tenant_id, p.user_id)
            sources = await store.sources(cur, rc.tenant_id, p.user_id)
            quarantined = await store.quarantine_counts(cur, rc.tenant_id, p.user_id)
        return x.Status(
            enabled=self.disabled is None, reason=self.disabled,
            prompt_version=EXTRACT_VERSION, windows=windows, last_error=error,
            sources=[x.SourceSummary(source=s, summary=summary, windows=n, updated_at=at)
                     for s, summary, n, at in sources],
            quarantined=quarantined)

    async def quarantine(self, p: x.QuarantineQuery, rc: RpcContext) -> x.QuarantineList:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            rows = await store.quarantined(cur, rc.tenant_id, p.user_id, p.limit)
        return x.QuarantineList(items=[
            x.QuarantinedItem(window_id=w, source=s, prompt_version=v,
                              index=None if idx < 0 else idx, reason=reason, detail=detail,
                              raw=raw, created_at=at)
            for w, s, v, idx, reason, detail, raw, at in rows])

    async def reextract(self, p: x.ReextractParams, rc: RpcContext) -> x.Reextraction:
        if self.disabled is not None:
            raise RpcError("conflict", f"the extractor is disabled ({self.disabled}): there "
                                       "is no model to extract with")
        user_id = p.user_id or TENANT_WIDE
        await self.ctx.commands.issue(rc, user_id, ReextractionRequested(
            since=p.since, prompt_version=EXTRACT_VERSION, source=p.source), PRODUCER)
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            n = await store.count_reextractable(cur, rc.tenant_id, user_id, p.since,
                                                EXTRACT_VERSION, p.source)
        if self._wake is not None:
            self._wake()
        return x.Reextraction(prompt_version=EXTRACT_VERSION, windows=n)
