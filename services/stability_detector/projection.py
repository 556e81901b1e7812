"""The learning projection: evidence, user commands and rebuilds, folded into the facet cache.

One projection (one consumer) for every event that touches the cache, so a user's candidates,
commands and rebuilds are applied in stream order. Time only comes from events: a rebuild uses
its `as_of`; a command takes effect at once, at the time of the user's last rebuild. A changed cache
emits one `CacheRebuilt` whose id derives from its cause, so redeliveries and replays never
publish a second one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import AsyncCursor
from pydantic import TypeAdapter

from habitus.events import Event
from habitus.events.causation import caused
from habitus.events.domain import (
    ActiveFacet,
    CacheRebuilt,
    CacheResetRequested,
    CandidateEmitted,
    FacetChange,
    FacetForgotten,
    FacetPinned,
    FacetUnpinned,
    FacetUpdated,
    ProvisionalFacet,
    RebuildRequested,
)
from habitus.events.envelope import Payload
from habitus.events.evidence import EvidenceRef
from habitus.projection import ApplyContext, Delivered, Projection
from services.stability_detector import metrics, store
from services.stability_detector.scoring import (
    AUTO,
    PROVISIONAL,
    Command,
    FacetRow,
    active_list,
    compute_cache,
    diff,
    next_due,
)
from services.stability_detector.settings import LearningSettings, get_learning_settings

log = logging.getLogger(__name__)
PRODUCER = "stability_detector"
#: the user's commands, by payload type: what each does to the cache
COMMANDS: dict[type[Payload], str] = {
    FacetPinned: "pin",
    FacetUnpinned: "unpin",
    FacetForgotten: "forget",
    FacetUpdated: "update",
    CacheResetRequested: "reset",
}


_REFS = TypeAdapter(list[EvidenceRef])


def evidence_of(delivered: Delivered) -> store.EvidenceRow:
    event = delivered.event
    p: CandidateEmitted = event.payload
    return store.EvidenceRow(
        event.tenant_id, event.user_id, event.event_id, delivered.seq, p.class_.value, p.key,
        p.value, p.cue_family.value, p.observed_at, p.initial_confidence, p.producer,
        _REFS.dump_json(p.evidence).decode(), event.occurred_at,
        p.stance.value if p.stance is not None else None, p.sentence,
    )


def command_of(delivered: Delivered) -> Command:
    event = delivered.event
    payload = event.payload
    return Command(
        kind=COMMANDS[type(payload)],
        at=event.occurred_at,
        seq=delivered.seq,
        facet_class=getattr(payload, "class_", None) and payload.class_.value,
        key=getattr(payload, "key", None),
        value=getattr(payload, "value", None),
    )


_REF_WORDS = {"turn": ("chat turn", "chat turns"),
              "turn_window": ("conversation", "conversations"),
              "email_message": ("email signature", "email signatures"),
              "document_chunk": ("document", "documents"),
              "provider": ("connected account", "connected accounts"),
              "tool_call": ("tool call", "tool calls"),
              "source_summary": ("summary", "summaries"), "trace": ("agent run", "agent runs")}


def evidence_summary(row: FacetRow) -> list[str]:
    """What a facet rests on, in words ("1 email signature", "2 chat turns")."""
    counts: dict[str, int] = {}
    for ref in row.evidence_refs:
        kind = str(ref.get("type", ""))
        counts[kind] = counts.get(kind, 0) + 1
    out = []
    for kind, n in sorted(counts.items()):
        one, many = _REF_WORDS.get(kind, (kind, kind))
        out.append(f"{n} {one if n == 1 else many}")
    return out


def cache_rebuilt(cause: Event[Any], tenant_id: str, user_id: str, as_of: float,
                  old: dict[Any, FacetRow], new: dict[Any, FacetRow]) -> Event[Any] | None:
    d = diff(old, new)
    if not d.changed:
        return None
    changes = [
        FacetChange.model_validate({
            "class": (after or before).facet_class,  # type: ignore[union-attr]
            "key": (after or before).key,  # type: ignore[union-attr]
            "old_value": before.value if before else None,
            "new_value": after.value if after else None,
            "old_state": before.state if before else None,
            "new_state": after.state if after else None,
        })
        for before, after in d.changes
    ]
    active = [
        ActiveFacet.model_validate({
            "class": r.facet_class, "key": r.key, "value": r.value,
            "stability": None if math.isinf(r.stability) else round(r.stability, 6),
            "user_state": r.user_state, "origin": r.origin,
        })
        for r in active_list(new)
    ]
    provisional = [
        ProvisionalFacet.model_validate({
            "class": r.facet_class, "key": r.key, "value": r.value,
            "stability": round(r.stability, 6), "evidence": evidence_summary(r),
        })
        for r in sorted(new.values(), key=lambda r: (r.facet_class, r.key))
        if r.state == PROVISIONAL and r.user_state == AUTO and math.isfinite(r.stability)
    ]
    payload = CacheRebuilt(as_of=as_of, added=d.added, evicted=d.evicted, kept=d.kept,
                           total_size=len(active), changes=changes, active=active,
                           provisional=provisional)
    return caused(cause, payload, producer=PRODUCER, key=(tenant_id, user_id),
                  tenant_id=tenant_id, user_id=user_id, occurred_at=as_of)


class LearningProjection(Projection):
    name = "learning.cache"
    schema = store.SCHEMA
    tables = store.TABLES

    def __init__(self, settings: LearningSettings | None = None):
        self.settings = settings or get_learning_settings()

    async def on_candidates(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                            ctx: ApplyContext) -> None:
        """Evidence only: folded into the cache at the user's next rebuild."""
        await store.insert_evidence(cur, [evidence_of(d) for d in run])

    async def on_command(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            command = command_of(delivered)
            if not await store.insert_command(cur, event.tenant_id, event.user_id,
                                              event.event_id, command):
                continue  # the same command event seen again (published twice past the window)
            last_as_of, _ = await store.user_state(cur, event.tenant_id, event.user_id)
            as_of = command.at if last_as_of is None else last_as_of  # commands do not move time
            await self.rebuild_user(cur, event.tenant_id, event.user_id, as_of, delivered, ctx,
                                    trigger="command")

    async def on_rebuild_requested(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                                   ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            as_of = event.payload.as_of
            if event.payload.scope != "periodic":
                await self.rebuild_user(cur, event.tenant_id, event.user_id, as_of, delivered,
                                        ctx)
                continue
            for tenant_id, user_id in await store.due_users(cur, as_of):
                try:  # one user's failure is its own (rebuild_user rolls back its savepoint)
                    await self.rebuild_user(cur, tenant_id, user_id, as_of, delivered, ctx,
                                            trigger="periodic")
                except (psycopg.DataError, psycopg.IntegrityError, ValueError) as exc:
                    log.error("periodic rebuild of a user failed; it stays due",
                              extra={"tenant": tenant_id, "error": repr(exc)})

    handlers = {
        CandidateEmitted: on_candidates,
        **dict.fromkeys(COMMANDS, on_command),
        RebuildRequested: on_rebuild_requested,
    }
    emits = (CacheRebuilt,)

    async def rebuild_user(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                           as_of: float, cause: Delivered, ctx: ApplyContext, *,
                           trigger: str = "requested") -> None:
        started = time.perf_counter()
        await store.lock_user(cur, tenant_id, user_id)
        try:
            # A savepoint, so that after a failure the transaction is usable again and the lock
            # can be released before the error goes on.
            async with cur.connection.transaction():
                await self._rebuild_locked(cur, tenant_id, user_id, as_of, cause, ctx)
        finally:
            await store.unlock_user(cur, tenant_id, user_id)
        metrics.REBUILD_SECONDS.labels(trigger).observe(time.perf_counter() - started)

    async def _rebuild_locked(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                              as_of: float, cause: Delivered, ctx: ApplyContext) -> None:
        last_as_of, _ = await store.user_state(cur, tenant_id, user_id)
        as_of = max(as_of, last_as_of or as_of)  # the cache's clock never runs backwards
        evidence = await store.load_evidence(cur, tenant_id, user_id)
        commands = await store.load_commands(cur, tenant_id, user_id)
        old = await store.load_facets(cur, tenant_id, user_id)
        new = compute_cache(evidence, commands, as_of, self.settings,
                            commands_as_of=math.inf)
        await store.save_facets(cur, tenant_id, user_id, as_of, old, new, next_due(new))
        event = cache_rebuilt(cause.event, tenant_id, user_id, as_of, old, new)
        if event is not None:
            ctx.emit(event, cause)
