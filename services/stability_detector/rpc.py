"""The `learning.*` controllers.

Reads come from the `learning` tables (or, with `as_of`, are recomputed from the evidence and
commands in the log). Changes are commands: validated here, published as events, and answered
only after the projection applied them, so a caller's next read sees its own write.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract.learning import (
    CacheParams,
    ExplainFacet,
    FacetParams,
    ListFacets,
    UpdateFacet,
)
from habitus.contract.rpc import METHODS
from habitus.crypto import Shredded
from habitus.events.domain import (
    CacheResetRequested,
    FacetForgotten,
    FacetPinned,
    FacetUnpinned,
    FacetUpdated,
    RebuildRequested,
)
from habitus.events.envelope import Payload
from habitus.service.context import ServiceContext
from services.stability_detector import explain, store
from services.stability_detector.scoring import (
    ACTIVE,
    AUTO,
    FORGOTTEN,
    PINNED,
    PROVISIONAL,
    FacetRow,
    compute_cache,
    decayed,
)
from services.stability_detector.settings import LearningSettings


def facet_doc(row: FacetRow) -> dict[str, Any]:
    return {
        "class": row.facet_class,
        "key": row.key,
        "value": row.value,
        "state": row.state,
        "user_state": row.user_state,
        "stability": None if math.isinf(row.stability) else round(row.stability, 6),
        "pinned": row.user_state == PINNED,
        "origin": row.origin,
        "evidence_count": row.evidence_count,
        "cue_counts": dict(row.cue_counts),
        "first_seen_at": row.first_seen_at,
        "last_evidence_at": row.last_evidence_at,
        "next_change_at": row.next_change_at,
        "evidence": list(row.evidence_refs),
    }


@contextlib.contextmanager
def readable(user_id: str) -> Iterator[None]:
    """A read of a user erased meanwhile (their keys destroyed, their rows not yet deleted)
    answers as for a user with nothing, not with an internal error."""
    try:
        yield
    except Shredded:
        raise RpcError("not_found", f"user {user_id} was erased") from None


class LearningRpc:
    """The `learning.*` handlers, built on the running service's resources."""

    def __init__(self, ctx: ServiceContext, settings: LearningSettings):
        self.ctx = ctx
        self.settings = settings
        self.registry = RpcRegistry()
        r = self.registry
        r.implement(METHODS["learning.list_facets"])(self.list_facets)
        r.implement(METHODS["learning.get_facet"])(self.get_facet)
        r.implement(METHODS["learning.update_facet"])(self.update_facet)
        r.implement(METHODS["learning.pin_facet"])(self.pin_facet)
        r.implement(METHODS["learning.unpin_facet"])(self.unpin_facet)
        r.implement(METHODS["learning.forget_facet"])(self.forget_facet)
        r.implement(METHODS["learning.reset_cache"])(self.reset_cache)
        r.implement(METHODS["learning.rebuild_cache"])(self.rebuild_cache)
        r.implement(METHODS["learning.cache_stats"])(self.cache_stats)
        r.implement(METHODS["learning.explain_facet"])(self.explain_facet)

    # ------------------------------------------------------------------ reads

    async def _stored(self, cur: Any, tenant_id: str, user_id: str) -> dict[Any, FacetRow]:
        """The user's cache as of their last rebuild: rows a rebuild left as they were (they
        changed by decay alone) decayed to its time."""
        rows = await store.load_facets(cur, tenant_id, user_id)
        last_as_of, _ = await store.user_state(cur, tenant_id, user_id)
        if last_as_of is None:
            return rows
        return {fk: decayed(r, last_as_of, self.settings) for fk, r in rows.items()}

    async def _facets(self, tenant_id: str, user_id: str) -> dict[Any, FacetRow]:
        with readable(user_id):
            async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
                return await self._stored(cur, tenant_id, user_id)

    async def _at(self, tenant_id: str, user_id: str, as_of: float) -> dict[Any, FacetRow]:
        """The cache as it was at `as_of`, recomputed from the log."""
        with readable(user_id):
            async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
                evidence = await store.load_evidence(cur, tenant_id, user_id)
                commands = await store.load_commands(cur, tenant_id, user_id)
        return compute_cache(evidence, commands, as_of, self.settings)

    async def _current(self, tenant_id: str, user_id: str
                       ) -> tuple[dict[Any, FacetRow], float | None]:
        """The cache and when its oldest evidence not yet rebuilt arrived (None: none)."""
        with readable(user_id):
            async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
                rows = await self._stored(cur, tenant_id, user_id)
                return rows, await store.pending_since(cur, tenant_id, user_id)

    async def list_facets(self, p: ListFacets, rc: RpcContext) -> dict[str, Any]:
        # a past cache is recomputed from every piece of evidence: nothing pending for it
        rows, pending = ((await self._at(rc.tenant_id, p.user_id, p.as_of), None)
                         if p.as_of is not None
                         else await self._current(rc.tenant_id, p.user_id))
        wanted = [r for r in rows.values()
                  if r.state in (ACTIVE, PROVISIONAL) and r.user_state != FORGOTTEN
                  and (p.class_ is None or r.facet_class == p.class_.value)]
        wanted.sort(key=lambda r: (r.state != ACTIVE, -r.stability, r.facet_class, r.key))
        return {"user_id": p.user_id, "as_of": p.as_of, "pending_since": pending,
                "facets": [facet_doc(r) for r in wanted]}

    async def _existing(self, tenant_id: str, p: FacetParams) -> FacetRow:
        row = (await self._facets(tenant_id, p.user_id)).get((p.class_.value, p.key))
        if row is None:
            raise RpcError("not_found", f"no facet {p.class_.value}/{p.key} for user "
                                        f"{p.user_id}")
        return row

    async def get_facet(self, p: FacetParams, rc: RpcContext) -> dict[str, Any]:
        return facet_doc(await self._existing(rc.tenant_id, p))

    async def cache_stats(self, p: CacheParams, rc: RpcContext) -> dict[str, Any]:
        current, pending = await self._current(rc.tenant_id, p.user_id)
        rows = current.values()
        by_state = Counter(r.state for r in rows if r.user_state != FORGOTTEN)
        by_class: dict[str, Counter[str]] = {}
        for r in rows:
            if r.user_state != FORGOTTEN:
                by_class.setdefault(r.facet_class, Counter())[r.state] += 1
        return {
            "user_id": p.user_id,
            "total": sum(by_state.values()),
            **{s: by_state.get(s, 0) for s in ("active", "provisional", "candidate")},
            "pinned": sum(1 for r in rows if r.user_state == PINNED),
            "forgotten": sum(1 for r in rows if r.user_state == FORGOTTEN),
            "by_class": {c: dict(sorted(v.items())) for c, v in sorted(by_class.items())},
            "pending_since": pending,
        }

    async def explain_facet(self, p: ExplainFacet, rc: RpcContext) -> dict[str, Any]:
        fk = (p.class_.value, p.key)
        with readable(p.user_id):
            async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
                evidence = await store.load_evidence(cur, rc.tenant_id, p.user_id, fk)
                commands = await store.load_commands(cur, rc.tenant_id, p.user_id)
                last_as_of, _ = await store.user_state(cur, rc.tenant_id, p.user_id)
        as_of, commands_as_of = explain.moments(p.as_of, last_as_of, time.time())
        explained = explain.explain(fk, evidence, commands, as_of, commands_as_of,
                                    self.settings)
        if explained is None:
            raise RpcError("not_found", f"no evidence or setting for {fk[0]}/{fk[1]}")
        return explained

    # ------------------------------------------------------------------ commands

    async def _command(self, rc: RpcContext, user_id: str, payload: Payload) -> int:
        """Publish the command and answer once the learning cache, PROFILE.md and the prompt
        context all reflect it (or with the reason it was refused)."""
        _, result = await self.ctx.commands.issue(rc, user_id, payload, "learning.rpc")
        return result.seq

    def _ref(self, p: FacetParams, **extra: Any) -> dict[str, Any]:
        return {"class": p.class_.value, "key": p.key, **extra}

    async def update_facet(self, p: UpdateFacet, rc: RpcContext) -> dict[str, Any]:
        await self._command(rc, p.user_id,
                            FacetUpdated.model_validate(self._ref(p, value=p.value)))
        return facet_doc(await self._existing(rc.tenant_id, p))

    async def pin_facet(self, p: FacetParams, rc: RpcContext) -> dict[str, Any]:
        row = await self._existing(rc.tenant_id, p)
        if not row.value:
            raise RpcError("conflict", f"{p.class_.value}/{p.key} has no value to pin; "
                                       "use update_facet to set one")
        await self._command(rc, p.user_id,
                            FacetPinned.model_validate(self._ref(p, value=row.value)))
        return facet_doc(await self._existing(rc.tenant_id, p))

    async def unpin_facet(self, p: FacetParams, rc: RpcContext) -> dict[str, Any]:
        row = await self._existing(rc.tenant_id, p)
        if row.user_state == AUTO:
            raise RpcError("conflict", f"{p.class_.value}/{p.key} is not pinned or forgotten")
        await self._command(rc, p.user_id, FacetUnpinned.model_validate(self._ref(p)))
        after = (await self._facets(rc.tenant_id, p.user_id)).get((p.class_.value, p.key))
        return facet_doc(after) if after else {**self._ref(p), "state": "dropped",
                                               "user_state": AUTO}

    async def forget_facet(self, p: FacetParams, rc: RpcContext) -> dict[str, Any]:
        await self._existing(rc.tenant_id, p)
        await self._command(rc, p.user_id, FacetForgotten.model_validate(self._ref(p)))
        return facet_doc(await self._existing(rc.tenant_id, p))

    async def reset_cache(self, p: CacheParams, rc: RpcContext) -> dict[str, Any]:
        await self._command(rc, p.user_id, CacheResetRequested(reason="learning.reset_cache"))
        return await self.cache_stats(p, rc)

    async def rebuild_cache(self, p: CacheParams, rc: RpcContext) -> dict[str, Any]:
        as_of = time.time()
        await self._command(rc, p.user_id, RebuildRequested(as_of=as_of, scope="manual",
                                                            reason="learning.rebuild_cache"))
        return {"as_of": as_of, **await self.cache_stats(p, rc)}

