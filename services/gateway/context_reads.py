"""`prompt.context` cache hits answered by the gateway itself, from the profile renderer's cache.

Every agent turn reads its context, and under load that read queued twice behind other work:
once in the gateway, and again in the renderer, whose event loop also applies the projection's
batches (a batch holds it for milliseconds at a time). A hit needs neither the renderer nor
Postgres: it is one pipelined Redis read, checked against the same change marks by the same
rule (habitus.context_cache), so the gateway serves it and forwards only what needs the
renderer: a miss (the renderer builds the context and caches it), a call with a `request`
(its habits section depends on the request and is never cached), and parameters that do not
validate (the renderer's answer names the field, as for every other method).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from redis.asyncio import Redis

from habitus.context_cache import answer, field_for, read_context
from habitus.contract.profile import PromptContextParams
from services.gateway.metrics import CONTEXT_READS

METHOD = "prompt.context"


class ContextReads:
    """The gateway's read of the context cache."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def cached(self, tenant_id: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The result of `prompt.context` with `params` for the tenant if the cache holds a
        current one; None: forward the call to the renderer."""
        try:
            p = PromptContextParams.model_validate(params)
        except ValidationError:
            CONTEXT_READS.labels("forwarded").inc()
            return None
        if p.request is not None:
            CONTEXT_READS.labels("forwarded").inc()
            return None
        hit = await read_context(self._redis, tenant_id, p.user_id,
                                 field_for(p.tools, p.budget_chars, p.unconfirmed))
        CONTEXT_READS.labels("hit" if hit is not None else "miss").inc()
        return answer(hit) if hit is not None else None
