"""The habits service's two projections.

`habits.capture` turns completed turns on HABITUS_INGEST into redacted observations (the raw
material Analyze reads); nothing else of a turn is kept, and an observation expires after the
tenant's retention. `habits.ledger` folds every habit event, whoever published it, into the
ledger with a before/after audit row per change, and keeps the duplicate pairs, the tenants' law
and settings. Both are pure folds of their streams: a replay from the first sequence rebuilds
them (the audit's times are the events', not the replay's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.domain import (
    HabitActivated,
    HabitApproved,
    HabitDisabled,
    HabitDormant,
    HabitDuplicateFound,
    HabitDuplicateResolved,
    HabitEdited,
    HabitEnabled,
    HabitEvidenceAdded,
    HabitLawSet,
    HabitMerged,
    HabitRejected,
    HabitRetired,
    HabitSettingsChanged,
    HabitSuggested,
    HabitSuperseded,
    HabitSuppressedByLaw,
)
from habitus.events.ingest import TurnRecorded
from habitus.ids import TENANT_WIDE
from habitus.projection import ApplyContext, Delivered, Projection
from services.habits import identity, ledger, metrics, store
from services.habits.embedding import Embedder
from services.habits.law import parse_law, violations
from services.habits.redaction import capture_text
from services.habits.scoring import utc_day
from services.habits.settings import HabitsSettings

DAY = 86_400.0


class CaptureProjection(Projection):
    name = "habits.capture"
    schema = store.SCHEMA
    tables = (store.OBSERVATIONS,)
    #: Analyze's bookkeeping beside the observations it reads
    also_holds = (store.WATERMARKS, store.ANSWERS, store.QUARANTINE)

    def __init__(self, settings: HabitsSettings | None = None):
        self.enabled = (settings or HabitsSettings()).capture

    async def on_turns(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        if not self.enabled:
            return
        kept: list[tuple[Delivered, TurnRecorded, str]] = []
        for delivered in run:
            turn: TurnRecorded = delivered.event.payload
            if turn.outcome != "completed":
                metrics.NOT_CAPTURED.labels(reason=turn.outcome).inc()
                continue
            text = capture_text(turn.user_message, turn.assistant_message)
            if text is None:
                metrics.NOT_CAPTURED.labels(reason="sensitive").inc()
                continue
            kept.append((delivered, turn, text))
        retention = await store.retention_days_of(
            cur, {delivered.event.tenant_id for delivered, _, _ in kept})
        captured: list[tuple[str, str, store.Observation]] = []
        for delivered, turn, text in kept:
            event = delivered.event
            observed = turn.assistant_at
            expires = observed + retention[event.tenant_id] * DAY
            captured.append((event.tenant_id, event.user_id, store.Observation(
                seq=delivered.seq, event_id=event.event_id, session_id=turn.session_id,
                turn_id=turn.turn_id, day=utc_day(observed), text=text,
                bytes=len(text.encode("utf-8")), checksum=identity.sha256(text),
                observed_at=observed, expires_at=expires)))
            metrics.CAPTURED.inc()
        await store.add_observations(cur, captured)

    handlers = {TurnRecorded: on_turns}


class LedgerProjection(Projection):
    name = "habits.ledger"
    schema = store.SCHEMA
    #: the tenant's law re-stamps every user's habits (`on_law`): a partition must hold all of
    #: a tenant's events to fold them in order
    partition_by = "tenant"
    tables = (store.HABITS, store.AUDIT, store.DUPLICATES, store.LAWS, store.SETTINGS)

    def __init__(self, embedder: Embedder | None = None):
        self._embedder = embedder

    async def after_erase(self, users: Mapping[tuple[str, str], int], *, committed: bool
                          ) -> None:
        """The encoder's cached vectors of the users' wordings go too. They are dropped by
        whose they are, not by their text: erasure destroys the user's keys first, so their
        sealed wordings no longer open. Again once committed: a comparison racing the erasure
        may have put some back."""
        if self._embedder is not None:
            for owner in users:
                self._embedder.forget_owner(owner)

    async def _fold(self, cur: AsyncCursor[Any], delivered: Delivered, habit_id: str,
                    change: Any = None) -> None:
        event = delivered.event
        before = await store.load_habit(cur, event.tenant_id, event.user_id, habit_id)
        after = (change(before) if change is not None
                 else ledger.evolve(before, event.payload, event.occurred_at))
        if after is None or (before is not None and after.checksum == before.checksum):
            return  # nothing it applies to, or nothing it changes
        after = await self._under_current_law(cur, event.tenant_id, after, event.occurred_at)
        await self._save(cur, delivered, event.user_id, before, after)

    async def _save(self, cur: AsyncCursor[Any], delivered: Delivered, user_id: str,
                    before: ledger.Habit | None, after: ledger.Habit) -> None:
        event = delivered.event
        await store.save_habit(cur, event.tenant_id, user_id, before, after, store.Change(
            event.event_id, event.type, delivered.seq, event.occurred_at, event.producer))
        metrics.TRANSITIONS.labels(type=event.type).inc()

    async def _under_current_law(self, cur: AsyncCursor[Any], tenant_id: str,
                                 habit: ledger.Habit, at: float) -> ledger.Habit:
        """A habit activated under a law that changed meanwhile (the approval was decided
        while the tenant's law was being replaced) is checked against the law in force: if
        that allows it, it carries the current law's hash (else it keeps the old one, is not
        selected, and the law check that follows the change suppresses it)."""
        if habit.status is not ledger.Status.ACTIVE:
            return habit
        stored = await store.law(cur, tenant_id)
        try:
            law = parse_law(None if stored is None else stored[0])
        except ValueError:
            return habit
        if habit.law_hash == law.hash or violations(law, habit.condition, habit.behavior):
            return habit
        return ledger.re_stamp(habit, law.hash, at)

    async def on_habit(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for delivered in run:
            await self._fold(cur, delivered, delivered.event.payload.habit_id)

    async def on_merged(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            p: HabitMerged = event.payload
            absorbed = await store.load_habit(cur, event.tenant_id, event.user_id, p.habit_id)
            await self._fold(cur, delivered, p.habit_id)
            if absorbed is not None:
                await self._fold(cur, delivered, p.into, lambda kept, a=absorbed, e=event:
                                 None if kept is None else ledger.absorb(kept, a, e.occurred_at))

    async def on_pair(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                      ctx: ApplyContext) -> None:
        for delivered in run:
            e = delivered.event
            p = e.payload
            if isinstance(p, HabitDuplicateFound):
                await store.upsert_pair(cur, e.tenant_id, e.user_id, p.habit_id, p.other_id,
                                        p.similarity_bp, p.strong, e.occurred_at)
            else:
                await store.resolve_pair(cur, e.tenant_id, e.user_id, p.habit_id, p.other_id,
                                         p.decision, e.occurred_at)

    async def on_law(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                     ctx: ApplyContext) -> None:
        """The law and, for every active habit of the tenant it allows, the new law's hash
        (the ones it forbids keep the old hash, so selection skips them until the law check
        suppresses them)."""
        for delivered in run:
            e = delivered.event
            p: HabitLawSet = e.payload
            await store.set_law(cur, e.tenant_id, e.user_id, p.text, p.law_hash, e.occurred_at)
            if e.user_id != TENANT_WIDE:
                continue  # only the tenant-wide law is the tenant's
            try:
                law = parse_law(p.text)
            except ValueError:
                continue  # refused at the API; a law that cannot be read allows nothing new
            for user_id, habit in await store.active_in_tenant(cur, e.tenant_id):
                if violations(law, habit.condition, habit.behavior):
                    continue
                stamped = ledger.re_stamp(habit, law.hash, e.occurred_at)
                if stamped is not habit:
                    await self._save(cur, delivered, user_id, habit, stamped)

    async def on_settings(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for delivered in run:
            e = delivered.event
            p: HabitSettingsChanged = e.payload
            await store.set_tenant_settings(cur, e.tenant_id, e.user_id, store.TenantSettings(
                p.retention_days, p.scheduled_analyze, tuple(p.project_names)), e.occurred_at)

    handlers = {
        HabitSuggested: on_habit, HabitEvidenceAdded: on_habit, HabitApproved: on_habit,
        HabitActivated: on_habit, HabitRejected: on_habit, HabitEdited: on_habit,
        HabitRetired: on_habit, HabitDisabled: on_habit, HabitEnabled: on_habit,
        HabitDormant: on_habit, HabitSuppressedByLaw: on_habit, HabitSuperseded: on_habit,
        HabitMerged: on_merged, HabitDuplicateFound: on_pair, HabitDuplicateResolved: on_pair,
        HabitLawSet: on_law, HabitSettingsChanged: on_settings,
    }
