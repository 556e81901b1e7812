"""`prompt.context` cache hits answered by the gateway itself, from the profile renderer's cache.

Every agent turn reads its context, and under load that read queued twice behind other work:
once in the gateway, and again in the renderer, whose event loop also applies the projection's
batches (a batch holds it for milliseconds at a time). A hit needs neither the renderer nor
Postgres: it is one pipelined Redis read, checked against the same change marks by the same
rule (habitus.context_cache), so the gateway serves it and forwards only what needs the
renderer: a miss (the renderer builds the context and caches it), a call with a `request`
(its habits section depends on the request and is never cached), and parameters that do not
validate (the renderer's answer names the field, as for every other method).

What a hit read from Redis is kept in the gateway's memory until Redis says its user's
context changed (services.gateway.local_contexts), so the next read of the same variant needs
no round trip at all.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import ValidationError
from redis.asyncio.client import Pipeline

from habitus.context_cache import answer, field_for, judge, queue_read
from habitus.contract.profile import PromptContextParams
from services.gateway.local_contexts import LocalContexts, Ticket
from services.gateway.metrics import CONTEXT_READS, LOCAL_CONTEXT_HITS

METHOD = "prompt.context"

# Where a `prompt.context` answer came from, in the W3C `Server-Timing` header (a metric name
# only): `memory` (the gateway's), `cache` (Redis), `renderer` (built, or with a `request`).
# A client timing its reads can tell a slow miss from a slow hit (`make load`'s probe does).
SERVED_FROM_MEMORY = {"Server-Timing": "memory"}
SERVED_FROM_CACHE = {"Server-Timing": "cache"}
SERVED_BY_RENDERER = {"Server-Timing": "renderer"}


class ContextReads:
    """The gateway's read of the context cache: from memory (`kept`), else in two halves
    around the round trip it shares with the read budget's charge
    (services.gateway.access.Access.charge_and_read)."""

    def __init__(self, local: LocalContexts | None = None) -> None:
        self.local = local

    def wanted(self, params: dict[str, Any]) -> tuple[str, str] | None:
        """(user, cache field) of the entry that would answer `prompt.context` with `params`;
        None: the call goes to the renderer (it has a `request`, or does not validate)."""
        try:
            p = PromptContextParams.model_validate(params)
        except ValidationError:
            CONTEXT_READS.labels("forwarded").inc()
            return None
        if p.request is not None:
            CONTEXT_READS.labels("forwarded").inc()
            return None
        return p.user_id, field_for(p.tools, p.budget_chars, p.unconfirmed)

    def kept(self, tenant_id: str, wanted: tuple[str, str]) -> bytes | None:
        """The call's response body from memory, if its user's context has not changed since
        it was read from Redis; None: read Redis (holding `ticket()` first)."""
        if self.local is None:
            return None
        kept = self.local.get(tenant_id, *wanted)
        if kept is not None:
            CONTEXT_READS.labels("hit").inc()
            LOCAL_CONTEXT_HITS.inc()
        return kept

    def ticket(self) -> Ticket | None:
        return self.local.ticket() if self.local is not None else None

    @staticmethod
    def queue(pipe: Pipeline, tenant_id: str, wanted: tuple[str, str]) -> None:
        """Queue the entry's reads (two commands) on `pipe`."""
        queue_read(pipe, tenant_id, *wanted)

    def result(self, read: list[Any] | None, tenant_id: str, wanted: tuple[str, str],
               ticket: Ticket | None) -> JSONResponse | None:
        """The call's answer from what `queue` read (None: Redis failed), if the entry is
        current, kept in memory unless its user changed meanwhile; None: forward the call to
        the renderer."""
        hit = judge(read[0], read[1])[0] if read is not None else None
        CONTEXT_READS.labels("hit" if hit is not None else "miss").inc()
        if hit is None:
            return None
        response = JSONResponse({"result": answer(hit)}, headers=SERVED_FROM_CACHE)
        if self.local is not None and ticket is not None:
            self.local.store(tenant_id, *wanted, bytes(response.body), ticket)
        return response
