"""The learning projection: evidence, user commands and rebuilds, folded into the facet cache.

One projection (one consumer) for every event that touches the cache, so a user's candidates,
commands and rebuilds are applied in stream order. Time only comes from events: a rebuild uses
its `as_of`; a command takes effect at once, at the time of the user's last rebuild. A changed cache
emits one `CacheRebuilt` whose id derives from its cause, so redeliveries and replays never
publish a second one.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import AsyncCursor
from pydantic import TypeAdapter

from habitus.crypto import Shredded
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
from services.stability_detector.incremental import advance, deferred_of, summarize_key
from services.stability_detector.periodic import periodic_slot
from services.stability_detector.scoring import (
    AUTO,
    PROVISIONAL,
    Command,
    Evidence,
    FacetRow,
    UserStats,
    active_list,
    cache_from_stats,
    counted,
    diff,
    fold_commands,
    next_due,
    settled_rows,
    summarize,
    value_when_given,
)
from services.stability_detector.settings import LearningSettings, get_learning_settings
from services.stability_detector.summary import parse_refs

log = logging.getLogger(__name__)
#: a periodic rebuild reads the inputs of this many due users at a time (bounded memory)
PERIODIC_READ_USERS = 200
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
        # What every requested rebuild of the run reads first, read for all of them at once;
        # taken by a user's first rebuild, so a second one in the run reads what the first
        # wrote, and dropped at a periodic rebuild, which may rebuild any of them. What they
        # write waits for the run's end, or for the same user's next rebuild, or for a
        # periodic one (which reads anyone's rows).
        inputs = await store.rebuild_inputs(cur, [
            (d.event.tenant_id, d.event.user_id) for d in run
            if d.event.payload.scope != "periodic"])
        writes = store.RebuildWrites()
        for delivered in run:
            event = delivered.event
            as_of = event.payload.as_of
            user = (event.tenant_id, event.user_id)
            if event.payload.scope != "periodic":
                if writes.pending(user):
                    await writes.flush(cur)
                await self.rebuild_user(cur, event.tenant_id, event.user_id, as_of, delivered,
                                        ctx, inputs=inputs.pop(user, None), writes=writes)
                continue
            inputs.clear()
            await writes.flush(cur)
            due = await store.due_users(cur, as_of, periodic_slot(event.tenant_id,
                                                                  event.user_id))
            for start in range(0, len(due), PERIODIC_READ_USERS):
                chunk = due[start:start + PERIODIC_READ_USERS]
                await self._rebuild_due(cur, chunk, as_of, delivered, ctx)
        await writes.flush(cur)

    async def _rebuild_due(self, cur: AsyncCursor[Any], users: Sequence[tuple[str, str]],
                           as_of: float, cause: Delivered, ctx: ApplyContext) -> None:
        """A periodic rebuild's due users, their inputs read together; if that read fails
        (one user's stored summary will not parse, say), each user reads its own under its
        savepoint, so the bad one fails alone. A user erased meanwhile (their keys destroyed,
        their rows not yet deleted) is passed over, never failing the others."""
        inputs: dict[tuple[str, str], store.RebuildInputs | None]
        try:
            async with cur.connection.transaction():
                inputs = await store.rebuild_inputs(cur, users)
        except (psycopg.DataError, psycopg.IntegrityError, ValueError):
            inputs = {}
        for tenant_id, user_id in users:
            try:  # one user's failure is its own (rebuild_user rolls back its savepoint)
                await self.rebuild_user(cur, tenant_id, user_id, as_of, cause, ctx,
                                        trigger="periodic",
                                        inputs=inputs.get((tenant_id, user_id)))
            except Shredded:
                log.info("periodic rebuild passed over a user being erased",
                         extra={"tenant": tenant_id})
            except (psycopg.DataError, psycopg.IntegrityError, ValueError) as exc:
                log.error("periodic rebuild of a user failed; it stays due",
                          extra={"tenant": tenant_id, "error": repr(exc)})

    handlers = {
        CandidateEmitted: on_candidates,
        **dict.fromkeys(COMMANDS, on_command),
        RebuildRequested: on_rebuild_requested,
    }
    emits = (CacheRebuilt,)
    #: the scheduler requests a user's rebuild once their new evidence settled
    requeues = (RebuildRequested,)

    async def rebuild_user(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                           as_of: float, cause: Delivered, ctx: ApplyContext, *,
                           trigger: str = "requested",
                           inputs: store.RebuildInputs | None = None,
                           writes: store.RebuildWrites | None = None) -> None:
        """Rebuild one user's cache inside the batch's transaction.

        No lock of its own: every write to a user's cache is this projection's, in a batch
        transaction whose commit the checkpoint epoch fences, so a runner that lost its claim
        rolls back whatever it rebuilt (two advisory-lock statements per rebuild did nothing
        the fence does not). A periodic rebuild catches one user's failure and goes on to the
        next, so only it rebuilds under a savepoint, which leaves the transaction usable.

        A user whose keys were destroyed is erased: nothing of theirs can be read, and the
        erasure deletes their rows, so there is nothing to rebuild (found before anything is
        written).

        `writes`: where the rebuild's writes wait for the caller's flush (the caller flushes
        before this user's next rebuild); without it they are made before this returns."""
        started = time.perf_counter()

        async def rebuild() -> None:
            read = inputs if inputs is not None else (
                await store.rebuild_inputs(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]
            if read is None:
                log.info("rebuild of a user being erased skipped", extra={"tenant": tenant_id})
                return
            if writes is not None:
                await self._rebuild(cur, tenant_id, user_id, as_of, cause, ctx, read, writes)
                return
            own = store.RebuildWrites()
            await self._rebuild(cur, tenant_id, user_id, as_of, cause, ctx, read, own)
            await own.flush(cur)

        if trigger == "periodic":
            async with cur.connection.transaction():
                await rebuild()
        else:
            await rebuild()
        metrics.REBUILD_SECONDS.labels(trigger).observe(time.perf_counter() - started)

    async def _rebuild(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                       as_of: float, cause: Delivered, ctx: ApplyContext,
                       inputs: store.RebuildInputs, writes: store.RebuildWrites) -> None:
        state, commands, recorded, old = inputs.state, inputs.commands, inputs.held, inputs.facets
        if inputs.unsealed:  # rows from before sealing: summaries and facets written anew
            state = state._replace(folded_seq=None)
        as_of = max(as_of, state.last_as_of or as_of)  # the cache's clock never runs backwards
        stats, summaries = await self._summaries(cur, tenant_id, user_id, as_of, commands, state,
                                                 inputs.stats, inputs.fresh, writes)
        held = await self._held_values(cur, tenant_id, user_id, commands, recorded, writes)
        new = cache_from_stats(stats, commands, as_of, self.settings, commands_as_of=math.inf,
                               held=lambda _fk, control: (control.value if control.value
                                                          is not None else held[control.seq]))
        new = await self._with_refs(cur, tenant_id, user_id, stats, old, new)
        writes.facets(tenant_id, user_id, as_of, old, new,
                      settled_rows(old, new, as_of, self.settings), next_due(new), summaries,
                      replace_all=inputs.unsealed)
        event = cache_rebuilt(cause.event, tenant_id, user_id, as_of, old, new)
        if event is not None:
            ctx.emit(event, cause)

    async def _summaries(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                         as_of: float, commands: Sequence[Command], state: store.SummaryState,
                         stored: UserStats, read: list[Evidence] | None,
                         writes: store.RebuildWrites) -> tuple[UserStats, store.SummaryState]:
        """The user's summaries brought to `as_of`, saved, and where they now stand.

        Folded forward from the stored ones with only the evidence logged since (and what
        waited for its time): the cost of a rebuild follows what is new, not the user's
        history. Made again from the log for a user summarised never, with evidence applied out
        of order, or whose evidence window a reset moved. `read`: the evidence since, when the
        caller read it already (`RebuildInputs.fresh`)."""
        settings = self.settings
        _, window = fold_commands(commands, math.inf)
        if state.folded_seq is None or window != state.window:
            evidence = await store.load_evidence(cur, tenant_id, user_id)
            stats = summarize(evidence, as_of, window, settings)
            writes.stats(tenant_id, user_id,
                         [(*fk, v, s) for fk, values in stats.items() for v, s in values.items()],
                         (), replace_all=True)
            metrics.SUMMARIES.labels("from_log").inc()
            return stats, store.SummaryState(
                None, max((e.seq for e in evidence), default=0),
                tuple(deferred_of(evidence, as_of, window, settings)), window)
        stats = stored
        fresh = read if read is not None else await store.load_evidence_since(
            cur, tenant_id, user_id, state.folded_seq, state.deferred)
        await self._load_refs(cur, tenant_id, user_id, stats, {
            (e.facet_class, e.key, e.value) for e in fresh
            if e.observed_at <= as_of and counted(e, window, settings)})
        step = advance(stats, fresh, state.folded_seq, as_of, window, settings)
        changed, gone = step.changed, set()
        for fk in sorted(step.refold):
            written, removed = summarize_key(
                stats, fk, await store.load_evidence(cur, tenant_id, user_id, fk), as_of,
                window, settings)
            changed = (changed - removed) | written
            gone |= removed
        writes.stats(tenant_id, user_id,
                     [(c, k, v, stats[(c, k)][v]) for c, k, v in sorted(changed)], sorted(gone))
        metrics.SUMMARIES.labels("folded").inc()
        metrics.FOLDED_EVIDENCE.inc(len(fresh))
        return stats, store.SummaryState(None, step.folded_seq, tuple(step.deferred), window)

    @staticmethod
    async def _load_refs(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                         stats: UserStats, values: set[tuple[str, str, str]]) -> None:
        """Read the refs of those of `values` that have a stored summary without them."""
        wanted = sorted(v for v in values
                        if (s := stats.get(v[:2], {}).get(v[2])) is not None and s.refs is None)
        loaded = await store.load_refs(cur, tenant_id, user_id, wanted)
        for c, k, v in wanted:
            stats[(c, k)][v].refs = parse_refs(loaded.get((c, k, v), ()))

    async def _with_refs(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                         stats: UserStats, old: dict[Any, FacetRow], new: dict[Any, FacetRow]
                         ) -> dict[Any, FacetRow]:
        """The rows of `new` with their refs: a value's summary untouched since the last
        rebuild has the refs its row had then; the others' are read (a value that overtook
        another by decay alone, say)."""
        def unloaded(row: FacetRow) -> bool:
            s = stats.get((row.facet_class, row.key), {}).get(row.value)
            return s is not None and s.refs is None

        missing = {(r.facet_class, r.key, r.value) for fk, r in new.items()
                   if unloaded(r) and (fk not in old or old[fk].value != r.value)}
        await self._load_refs(cur, tenant_id, user_id, stats, missing)
        out = {}
        for fk, row in new.items():
            s = stats.get(fk, {}).get(row.value)
            if s is not None and s.refs is None:
                row = dataclasses.replace(row, evidence_refs=old[fk].evidence_refs)
            elif s is not None and (row.facet_class, row.key, row.value) in missing:
                row = dataclasses.replace(row, evidence_refs=s.ref_list())
            out[fk] = row
        return out

    async def _held_values(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                           commands: Sequence[Command], held: dict[int, str | None],
                           writes: store.RebuildWrites) -> dict[int, str | None]:
        """The value each pin or forget without one holds: the value winning when it was
        given, worked out from that key's evidence the first time it is needed and recorded,
        so later rebuilds never read the key's history again (`held`: those recorded)."""
        controls, _ = fold_commands(commands, math.inf)
        missing = {c.seq: fk for fk, c in controls.items()
                   if c.value is None and c.seq not in held}
        fresh: dict[int, str | None] = {}
        for seq, fk in sorted(missing.items()):
            evidence = await store.load_evidence(cur, tenant_id, user_id, fk)
            fresh[seq] = value_when_given(fk, controls[fk], commands, evidence, self.settings)
        if fresh:
            writes.held(tenant_id, user_id, fresh)
        return held | fresh
