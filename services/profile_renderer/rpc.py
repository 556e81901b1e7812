"""`profile.*` and `prompt.context`.

`prompt.context` is the hot path (every agent turn): a cache hit is one Redis read; a miss reads
the user's facets, notes and tool rules in one Postgres connection and caches the result under
the user's current cache generation.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract.profile import GetProfile, PromptContextParams, SaveNotes
from habitus.contract.rpc import METHODS
from habitus.events.domain import ProfileNotesSaved
from habitus.service.context import ServiceContext
from services.profile_renderer import metrics, store
from services.profile_renderer.cache import ContextCache, field_for
from services.profile_renderer.context import build_context
from services.profile_renderer.document import (
    Account,
    accounts_body,
    apply_edit,
    facet_bodies,
    notes,
    render,
)
from services.profile_renderer.projection import RenderProjection

log = logging.getLogger(__name__)


class ProfileRpc:
    def __init__(self, ctx: ServiceContext, cache: ContextCache | None):
        self.ctx = ctx
        self.cache = cache
        self.registry = RpcRegistry()
        self.registry.implement(METHODS["profile.get"])(self.get)
        self.registry.implement(METHODS["profile.save_notes"])(self.save_notes)
        self.registry.implement(METHODS["prompt.context"])(self.prompt_context)

    async def _document(self, tenant_id: str, user_id: str) -> tuple[int, str]:
        """The latest version, or (0, the document as it would be rendered now)."""
        async with store.snapshot(self.ctx.pool) as cur:
            document = await store.latest(cur, tenant_id, user_id)
            if document is not None:
                return document.version, document.markdown
            bodies = facet_bodies(await store.load_facets(cur, tenant_id, user_id))
            accounts = await store.load_accounts(cur, tenant_id, user_id)
        bodies["connected-accounts"] = accounts_body([Account(k, v) for k, v in accounts])
        return 0, render(None, bodies).text

    async def get(self, p: GetProfile, rc: RpcContext) -> dict[str, Any]:
        version, markdown = await self._document(rc.tenant_id, p.user_id)
        return {"user_id": p.user_id, "version": version, "markdown": markdown,
                "sha256": store.sha256(markdown)}

    async def save_notes(self, p: SaveNotes, rc: RpcContext) -> dict[str, Any]:
        ctx = self.ctx
        version, current = await self._document(rc.tenant_id, p.user_id)
        if p.base_version > version:
            raise RpcError("invalid_argument",
                           f"base_version {p.base_version} is ahead of version {version}")
        async with ctx.pool.connection() as conn, conn.cursor() as cur:
            if await store.saved_since(cur, rc.tenant_id, p.user_id, p.base_version):
                raise RpcError("conflict", f"the notes changed since version {p.base_version}; "
                                           f"load version {version} and apply the edit again")
        ignored = apply_edit(current, p.markdown).ignored
        event, _ = await ctx.commands.issue(
            rc, p.user_id, ProfileNotesSaved(markdown=p.markdown, base_version=p.base_version),
            "profile.rpc")
        async with ctx.pool.connection() as conn, conn.cursor() as cur:
            caused = await store.version_caused_by(cur, rc.tenant_id, p.user_id,
                                                   event.event_id)
            latest = await store.latest(cur, rc.tenant_id, p.user_id)
        if caused is None and latest is not None and latest.version > version and \
                latest.origin == "notes":
            raise RpcError("conflict", "another save of the notes won; reload and retry")
        saved = caused if caused is not None else (latest.version if latest else 0)
        return {"user_id": p.user_id, "version": saved, "ignored_blocks": list(ignored)}

    async def prompt_context(self, p: PromptContextParams, rc: RpcContext) -> dict[str, Any]:
        started = time.perf_counter()
        context, cache = await self._context(p, rc)
        result = {"steered_by": [], **context}
        if p.request is not None:
            result = await self._with_habits(result, p, rc)
        metrics.CONTEXT_SECONDS.labels(cache).observe(time.perf_counter() - started)
        return result

    async def _with_habits(self, result: dict[str, Any], p: PromptContextParams,
                           rc: RpcContext) -> dict[str, Any]:
        """The cached context plus the habits section for this request (never cached: it
        depends on the request). The habits service unavailable, or failing, means no
        habits section (guidance fails closed), never a failed prompt."""
        try:
            chosen = await self.ctx.rpc.call(
                "habits.select", rc.tenant_id,
                {"user_id": p.user_id, "request": p.request, "context": p.context},
                correlation_id=rc.correlation_id,
                timeout=self.ctx.settings.rpc_timeout_seconds * 3)
        except RpcError as exc:
            log.info("no habits section", extra={"reason": exc.message})
            return result
        section = str(chosen.get("section") or "")
        if not section:
            return result
        sections = [*result["sections"], {"name": "habits", "content": section}]
        return {**result, "sections": sections,
                "text": "\n".join(x for x in (result["text"], section) if x),
                "steered_by": list(chosen.get("steered_by", []))}

    async def _context(self, p: PromptContextParams, rc: RpcContext
                       ) -> tuple[dict[str, Any], str]:
        """The context, and how the cache served it (hit, miss, uncached: no cache)."""
        cache = self.cache
        field = field_for(p.tools, p.budget_chars)
        if cache is not None:
            hit = await cache.get(rc.tenant_id, p.user_id, field)
            if hit is not None:
                metrics.CACHE_HITS.inc()
                return hit, "hit"
            metrics.CACHE_MISSES.inc()
        generation = await cache.generation(rc.tenant_id, p.user_id) if cache else "0"
        async with store.snapshot(self.ctx.pool) as cur:
            # One snapshot: the stamp is exactly the checkpoint the data is at.
            stamp = await store.checkpoint(cur, RenderProjection.name)
            facets = await store.load_facets(cur, rc.tenant_id, p.user_id)
            document = await store.latest(cur, rc.tenant_id, p.user_id)
            # the user's own rules and the tenant's (TENANT_WIDE); never another user's
            rules = await store.load_rules(cur, rc.tenant_id, p.user_id)
        built = build_context(facets=facets, notes=notes(document.markdown) if document else "",
                              rules=rules, tools=p.tools, budget_chars=p.budget_chars)
        result = {
            "user_id": p.user_id,
            "version": document.version if document else 0,
            "sections": [{"name": s.name, "content": s.content} for s in built.sections],
            "text": built.text,
        }
        if cache is not None:
            await cache.put(rc.tenant_id, p.user_id, field, result, generation, stamp)
        return result, "miss" if cache is not None else "uncached"

