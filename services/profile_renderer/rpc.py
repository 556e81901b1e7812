"""`profile.*` and `prompt.context`.

`prompt.context` is the hot path (every agent turn). The gateway answers most cache hits itself
(habitus.context_cache); what reaches the renderer is a call with a `request` (its habits section
is never cached), or a miss: one Redis round trip (the entry and the generation), one Postgres
statement (the facets, notes and tool rules, and the checkpoint they are at), and the result
cached under the generation read first.

`profile.save_notes` is the one way an edit of PROFILE.md changes what Habitus believes: once the
save won its compare-and-swap, the "Not yet sure" lines it moved out are confirmed and those it
deleted forgotten, each as the learning command `learning.update_facet` or `forget_facet` would
publish, and answered once PROFILE.md and the prompt show the outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor
from pydantic import ValidationError

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.context_cache import answer
from habitus.contract.profile import GetProfile, PromptContextParams, SaveNotes
from habitus.contract.rpc import METHODS
from habitus.events.domain import FacetForgotten, FacetUpdated, ProfileNotesSaved
from habitus.events.envelope import Payload
from habitus.service.context import ServiceContext
from services.profile_renderer import metrics, store
from services.profile_renderer.cache import ContextCache
from services.profile_renderer.coalesce import Coalescer
from services.profile_renderer.contexts import ContextBuilder, Variant
from services.profile_renderer.document import (
    NOT_YET_SURE,
    Account,
    SettledFacet,
    Settlement,
    accounts_body,
    apply_edit,
    facet_bodies,
    not_yet_sure_body,
    render,
    settle,
)
from services.profile_renderer.projection import RenderProjection

log = logging.getLogger(__name__)
PRODUCER = "profile.rpc"


def settled_doc(facet: SettledFacet) -> dict[str, str]:
    """A settled facet as the save's answer names it."""
    return {"class": facet.facet_class, "key": facet.key, "value": facet.value}


def settlement_commands(settlement: Settlement) -> list[tuple[SettledFacet, Payload]]:
    """The learning commands that carry out a settlement: forget each removed facet, set each
    promoted one to its value. Built before anything is published, so a facet that cannot be
    commanded fails the save before the notes are saved rather than half way through."""
    try:
        return [
            *((f, FacetForgotten.model_validate({"class": f.facet_class, "key": f.key}))
              for f in settlement.removed),
            *((f, FacetUpdated.model_validate({"class": f.facet_class, "key": f.key,
                                               "value": f.value}))
              for f in settlement.promoted),
        ]
    except ValidationError as exc:
        raise RpcError("internal", f"a not-yet-sure facet cannot be settled: {exc}") from None


async def document_in(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> tuple[int, str]:
    """The latest version, or (0, the document as it would be rendered now)."""
    document = await store.latest(cur, tenant_id, user_id)
    if document is not None:
        return document.version, document.markdown
    bodies = facet_bodies(await store.load_facets(cur, tenant_id, user_id))
    bodies[NOT_YET_SURE] = not_yet_sure_body(await store.load_provisional(cur, tenant_id,
                                                                          user_id))
    accounts = await store.load_accounts(cur, tenant_id, user_id)
    bodies["connected-accounts"] = accounts_body([Account(k, v) for k, v in accounts])
    return 0, render(None, bodies).text


async def edited_from(cur: AsyncCursor[Any], tenant_id: str, user_id: str, base_version: int,
                      version: int, current: str) -> str | None:
    """The document the user edited, which is what a settlement reads their edit against: a
    render since then may have added a not-yet-sure line they never saw, and its absence from
    their edit is no deletion. None when unknown (an edit of the unsaved version 0 after a
    version was written): such a save settles nothing."""
    if base_version == version:
        return current
    if base_version == 0:
        return None
    document = await store.version_of(cur, tenant_id, user_id, base_version)
    return None if document is None else document.markdown


class ProfileRpc:
    def __init__(self, ctx: ServiceContext, cache: ContextCache | None):
        self.ctx = ctx
        self.cache = cache
        self.builder = ContextBuilder(ctx.pool, cache, RenderProjection.name)
        #: builds of a context under way, joined by the calls that miss meanwhile
        self._builds: Coalescer[dict[str, Any]] = Coalescer()
        self.registry = RpcRegistry()
        self.registry.implement(METHODS["profile.get"])(self.get)
        self.registry.implement(METHODS["profile.save_notes"])(self.save_notes)
        self.registry.implement(METHODS["prompt.context"])(self.prompt_context)

    async def get(self, p: GetProfile, rc: RpcContext) -> dict[str, Any]:
        async with store.snapshot(self.ctx.pool) as cur:
            version, markdown = await document_in(cur, rc.tenant_id, p.user_id)
        return {"user_id": p.user_id, "version": version, "markdown": markdown,
                "sha256": store.sha256(markdown)}

    async def save_notes(self, p: SaveNotes, rc: RpcContext) -> dict[str, Any]:
        """Save the notes (compare-and-swap), then settle the not-yet-sure lines the edit
        moved out or deleted; answered once PROFILE.md shows all of it."""
        ctx = self.ctx
        t, u = rc.tenant_id, p.user_id
        async with store.snapshot(ctx.pool) as cur:
            version, current = await document_in(cur, t, u)
            base = await edited_from(cur, t, u, p.base_version, version, current)
            provisional = await store.load_provisional(cur, t, u)
        if p.base_version > version:
            raise RpcError("invalid_argument",
                           f"base_version {p.base_version} is ahead of version {version}")
        async with ctx.pool.connection() as conn, conn.cursor() as cur:
            if await store.saved_since(cur, t, u, p.base_version):
                raise RpcError("conflict", f"the notes changed since version {p.base_version}; "
                                           f"load version {version} and apply the edit again")
        settlement = settle(base, p.markdown, provisional) if base is not None else Settlement()
        commands = settlement_commands(settlement)
        ignored = apply_edit(current, p.markdown, settlement.lines).ignored
        event, _ = await ctx.commands.issue(
            rc, u, ProfileNotesSaved(markdown=p.markdown, base_version=p.base_version),
            PRODUCER)
        async with ctx.pool.connection() as conn, conn.cursor() as cur:
            caused = await store.version_caused_by(cur, t, u, event.event_id)
            latest = await store.latest(cur, t, u)
        if caused is None and latest is not None and latest.version > version and \
                latest.origin == "notes":
            raise RpcError("conflict", "another save of the notes won; reload and retry")
        saved = caused if caused is not None else (latest.version if latest else 0)
        await self._settle(rc, u, saved, commands)
        return {"user_id": u, "version": saved, "ignored_blocks": list(ignored),
                "confirmed": [settled_doc(f) for f in settlement.promoted],
                "forgotten": [settled_doc(f) for f in settlement.removed]}

    async def _settle(self, rc: RpcContext, user_id: str, saved: int,
                      commands: Sequence[tuple[SettledFacet, Payload]]) -> None:
        """Publish each command and wait until PROFILE.md and the prompt show it. One at a
        time, so a failure names what was done; the notes are saved by then, which the error
        says, so the caller does not save them again on a base that is gone."""
        for n, (facet, payload) in enumerate(commands):
            try:
                await self.ctx.commands.issue(rc, user_id, payload, PRODUCER)
            except RpcError as exc:
                done = ", ".join(f"{f.facet_class}/{f.key}" for f, _ in commands[:n]) or "none"
                raise RpcError(exc.code, f"the notes were saved as version {saved}, but "
                                         f"settling {facet.facet_class}/{facet.key} failed "
                                         f"({exc.message}); settled before it: {done}"
                               ) from None

    async def prompt_context(self, p: PromptContextParams, rc: RpcContext) -> dict[str, Any]:
        started = time.perf_counter()
        context, cache = await self._context(p, rc)
        result = answer(context)
        if p.request is not None:
            result = await self._for_request(result, p, rc)
        metrics.CONTEXT_SECONDS.labels(cache).observe(time.perf_counter() - started)
        return result

    async def _for_request(self, result: dict[str, Any], p: PromptContextParams,
                           rc: RpcContext) -> dict[str, Any]:
        """The cached context plus what depends on the request: the habits section, then the
        in-context examples (when asked for). With no `budget_chars` neither section's size
        depends on the other, so both services are asked at once (one round trip on the read
        every agent turn makes, not two); with one, the examples get what the habits left."""
        if p.examples == 0 and not p.skills:
            return _appended(result, "habits", *await self._habits(p, rc))
        if p.budget_chars is None:
            (habits, steered_by), examples = await asyncio.gather(
                self._habits(p, rc), self._examples(p, rc, None))
            return _appended(_appended(result, "habits", habits, steered_by), "examples",
                             examples)
        result = _appended(result, "habits", *await self._habits(p, rc))
        left = max(0, p.budget_chars - len(result["text"]) - 1)
        return _appended(result, "examples", await self._examples(p, rc, left))

    async def _habits(self, p: PromptContextParams, rc: RpcContext
                      ) -> tuple[str, list[str] | None]:
        """The habits section for this request and the habits that steered it (never cached:
        it depends on the request). The habits service unavailable, or failing, means no
        habits section (guidance fails closed), never a failed prompt."""
        try:
            chosen = await self.ctx.rpc.call(
                "habits.select", rc.tenant_id,
                {"user_id": p.user_id, "request": p.request, "context": p.context},
                correlation_id=rc.correlation_id,
                timeout=self.ctx.settings.rpc_timeout_seconds * 3)
        except RpcError as exc:
            log.info("no habits section", extra={"reason": exc.message})
            return "", None
        return str(chosen.get("section") or ""), list(chosen.get("steered_by", []))

    async def _examples(self, p: PromptContextParams, rc: RpcContext,
                        budget_chars: int | None) -> str:
        """The in-context `examples` section for this request (the trace router's
        `icl.context`: the user's own good traces of the request's class), within
        `budget_chars`. Opt-in, and never a failed prompt: the router unavailable means no
        section."""
        params: dict[str, Any] = {"user_id": p.user_id, "request": p.request}
        if p.examples is not None:
            params["examples"] = p.examples
        if p.skills is not None:
            params["skills"] = p.skills
        if budget_chars is not None:
            params["budget_chars"] = budget_chars
        try:
            found = await self.ctx.rpc.call("icl.context", rc.tenant_id, params,
                                            correlation_id=rc.correlation_id)
        except RpcError as exc:
            log.info("no examples section", extra={"reason": exc.message})
            return ""
        return str(found.get("section") or "")

    async def _context(self, p: PromptContextParams, rc: RpcContext
                       ) -> tuple[dict[str, Any], str]:
        """The context, and how it was served: hit, miss (built here), coalesced (a build
        already under way for the same user and variant), uncached (no cache)."""
        cache = self.cache
        t, u = rc.tenant_id, p.user_id
        variant = Variant.of(p.tools, p.budget_chars, p.unconfirmed)
        field = variant.field
        if cache is None:
            result, _ = await self.builder.build(t, u, variant, None)
            return result, "uncached"
        seen = await cache.lookup(t, u, field)
        if seen.hit is not None:
            metrics.CACHE_HITS.inc()
            return seen.hit, "hit"
        metrics.CACHE_MISSES.inc()
        if seen.generation == "unavailable":  # no marks known: nothing to judge a build by
            result, _ = await self.builder.build(t, u, variant, None)
            return result, "miss"
        result, joined = await self._builds.run(
            (t, u, field, seen.generation), seen.floor,
            lambda: self.builder.build(t, u, variant, seen.generation, record_at=time.time()))
        if joined:
            metrics.CACHE_COALESCED.inc()
        return result, "coalesced" if joined else "miss"


def _appended(result: dict[str, Any], name: str, section: str,
              steered_by: list[str] | None = None) -> dict[str, Any]:
    """`result` with the section `name` added after the others (unchanged when it is empty;
    `steered_by`, the habits that shaped the prompt, replaces the result's when given)."""
    if not section:
        return result
    added = {**result, "sections": [*result["sections"], {"name": name, "content": section}],
             "text": "\n".join(x for x in (result["text"], section) if x)}
    if steered_by is not None:
        added["steered_by"] = steered_by
    return added
