"""`habits.*`: review, declaration, the tenant's law and settings, Analyze and selection.

Every change runs under the user's lock (see `reviewer`), checks the checksum the caller read
(a habit changed since is a conflict, never overwritten), publishes its events and answers
once the ledger applied them, so the next read shows the change.
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract import habits as h
from habitus.contract.rpc import METHODS
from habitus.crypto import Shredded
from habitus.events.domain import (
    HabitActivated,
    HabitDisabled,
    HabitDuplicateResolved,
    HabitEdited,
    HabitEnabled,
    HabitLawSet,
    HabitMerged,
    HabitRejected,
    HabitRetired,
    HabitSettingsChanged,
    HabitStatus,
    HabitSuggested,
    HabitSuperseded,
    HabitSuppressedByLaw,
    ReviewStatus,
)
from habitus.ids import TENANT_WIDE
from services.habits import store
from services.habits.analyze import Analyzer, habit_id_for
from services.habits.batching import MAX_BATCH_BYTES, MAX_BATCH_RECORDS
from services.habits.identity import identity
from services.habits.law import Law, parse_law, violations
from services.habits.ledger import Habit
from services.habits.review import as_result, review_items, reviewable
from services.habits.reviewer import PRODUCER, Reviewer
from services.habits.selection import Selector

_PAIR_ACTIONS = ("merge", "supersede", "keep_separate")
#: what a person can do instead of declaring a wording one of their habits already has
_REDECLARE = {
    HabitStatus.DISABLED: "enable it instead",
    HabitStatus.SUPPRESSED_BY_LAW: "the law forbids it; archive it to declare it anew once "
                                   "the law allows it",
    HabitStatus.DORMANT: "a later correction contradicted it; edit it (it is then reviewed "
                         "again) or archive it to declare it anew",
}


def _conflict(message: str) -> RpcError:
    return RpcError("conflict", message)


class HabitsRpc:
    def __init__(self, reviewer: Reviewer, analyzer: Analyzer, selector: Selector,
                 proposals_off: str | None = None):
        self.reviewer = reviewer
        self.analyzer = analyzer
        #: why Analyze cannot run (no LLM configured), told to whoever lists habits
        self.proposals_off = proposals_off
        self.selector = selector
        self.registry = RpcRegistry()
        for name, handler in (
            ("habits.list", self.list), ("habits.get", self.get),
            ("habits.list_review", self.list_review), ("habits.apply_review", self.apply_review),
            ("habits.declare", self.declare), ("habits.edit", self.edit),
            ("habits.enable", self.enable), ("habits.disable", self.disable),
            ("habits.archive", self.archive), ("habits.set_law", self.set_law),
            ("habits.get_law", self.get_law), ("habits.configure", self.configure),
            ("habits.analyze", self.analyze), ("habits.select", self.select),
            ("habits.quarantine", self.quarantine),
        ):
            self.registry.implement(METHODS[name])(handler)

    # -- reads ---------------------------------------------------------------------------

    async def list(self, p: h.ListHabits, rc: RpcContext) -> dict[str, Any]:
        habits = await self.reviewer.habits(rc.tenant_id, p.user_id)
        now = time.time()
        return {"habits": [as_result(x, now) for x in habits
                           if p.status is None or x.status is p.status],
                "proposals_off": self.proposals_off}

    async def get(self, p: h.HabitRef, rc: RpcContext) -> dict[str, Any]:
        habit = await self.reviewer.habit(rc.tenant_id, p.user_id, p.habit_id)
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            trail = await store.audit_trail(cur, rc.tenant_id, p.user_id, p.habit_id)
        return {"habit": as_result(habit), "audit": [
            {"event_type": a.event_type, "at": a.at, "actor": a.actor, "before": a.before,
             "after": a.after} for a in trail]}

    async def list_review(self, p: h.ListReview, rc: RpcContext) -> dict[str, Any]:
        habits = await self.reviewer.habits(rc.tenant_id, p.user_id)
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            pairs = [x for x in await store.pairs(cur, rc.tenant_id, p.user_id)
                     if x.decision == "pending"]
        live = {x.habit_id for x in habits if x.status is not HabitStatus.ARCHIVED}
        pending: dict[str, list[str]] = {}
        for pair in pairs:
            if pair.first_id in live and pair.second_id in live:
                pending.setdefault(pair.first_id, []).append(pair.second_id)
                pending.setdefault(pair.second_id, []).append(pair.first_id)
        return {"items": review_items(habits, pending),
                "pending_duplicates": sum(len(v) for v in pending.values()) // 2}

    async def quarantine(self, p: h.HabitQuarantineQuery, rc: RpcContext) -> dict[str, Any]:
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            rows = await store.quarantined(cur, rc.tenant_id, p.user_id, p.limit)
        return {"items": [{"first_seq": f, "last_seq": last, "reason": reason, "item": item,
                           "model": model, "at": at} for f, last, reason, item, model, at
                          in rows]}

    async def get_law(self, p: h.EmptyParams, rc: RpcContext) -> dict[str, Any]:
        law = await self.reviewer.law(rc.tenant_id)
        return {"law_hash": law.hash, "text": law.text, "suppressed": []}

    # -- changes -------------------------------------------------------------------------

    async def _guarded(self, rc: RpcContext, p: h.Guarded) -> Habit:
        habit = await self.reviewer.habit(rc.tenant_id, p.user_id, p.habit_id)
        if habit.checksum != p.checksum:
            raise _conflict(f"habit {p.habit_id} changed since it was read (checksum "
                            f"{habit.checksum}); read it again")
        return habit

    async def _changed(self, rc: RpcContext, user_id: str, habit_id: str, outcome: str,
                       changed: builtins.list[str]) -> dict[str, Any]:
        habit = await self.reviewer.habit(rc.tenant_id, user_id, habit_id)
        return {"habit": as_result(habit), "outcome": outcome, "changed": changed}

    async def _emit(self, rc: RpcContext, user_id: str, payload: Any) -> None:
        await self.reviewer.publish(rc.tenant_id, user_id, payload,
                                    correlation_id=rc.correlation_id)

    async def apply_review(self, p: h.ApplyReview, rc: RpcContext) -> dict[str, Any]:
        t, u = rc.tenant_id, p.user_id
        if p.action in _PAIR_ACTIONS and p.other_id is None:
            raise RpcError("invalid_argument", f"other_id: required for {p.action}")
        if p.other_id is not None and p.other_id == p.habit_id:
            raise RpcError("invalid_argument", "other_id: must name another habit")
        async with self.reviewer.user_lock(t, u):
            habit = await self._guarded(rc, p)
            if p.action == "approve":
                if not reviewable(habit):
                    raise _conflict(f"habit {habit.habit_id} is {habit.status.value}: only a "
                                    "candidate can be approved")
                outcome = await self.reviewer.approve(t, u, habit, rc.correlation_id)
                changed = [habit.habit_id]
                if outcome is ReviewStatus.ACCEPTED_ACTIVE:
                    changed += await self.reviewer.promote(t, u, rc.correlation_id)
                return await self._changed(rc, u, habit.habit_id, outcome.value, changed)
            if p.action == "reject":
                if not reviewable(habit):
                    raise _conflict(f"habit {habit.habit_id} is {habit.status.value}: only a "
                                    "candidate can be rejected")
                await self._emit(rc, u, HabitRejected(habit_id=habit.habit_id, reason=p.reason))
                return await self._changed(rc, u, habit.habit_id, "rejected", [habit.habit_id])
            if p.action == "archive":
                return await self._archive(rc, u, habit, p.reason)
            assert p.other_id is not None
            other = await self.reviewer.habit(t, u, p.other_id)
            return await self._pair(rc, u, habit, other, p.action)

    async def _pair(self, rc: RpcContext, u: str, habit: Habit, other: Habit, action: str
                    ) -> dict[str, Any]:
        t = rc.tenant_id
        if HabitStatus.ARCHIVED in (habit.status, other.status):
            raise _conflict("an archived habit is no duplicate to resolve")
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            pair = next((x for x in await store.pairs(cur, t, u)
                         if {x.first_id, x.second_id} == {habit.habit_id, other.habit_id}),
                        None)
        if pair is None and action == "keep_separate":
            raise _conflict(f"{habit.habit_id} and {other.habit_id} are not a possible "
                            "duplicate pair")
        if habit.polarity != other.polarity and action == "merge":
            raise _conflict("habits of opposite polarity cannot be merged")
        if action == "supersede":
            await self._check_replacement(rc, u, habit, other)
        first, second = ((pair.first_id, pair.second_id) if pair is not None
                         else (habit.habit_id, other.habit_id))
        changed = [habit.habit_id, other.habit_id]
        if action == "merge":
            await self._emit(rc, u, HabitMerged(habit_id=habit.habit_id, into=other.habit_id))
            decision = "merged"
        elif action == "supersede":
            await self._emit(rc, u, HabitSuperseded(habit_id=other.habit_id, by=habit.habit_id))
            decision = "superseded"
        else:
            decision = "kept_separate"
        if pair is not None:
            await self._emit(rc, u, HabitDuplicateResolved(habit_id=first, other_id=second,
                                                           decision=decision))
        outcome = decision
        if action == "supersede":
            current = await self.reviewer.habit(t, u, habit.habit_id)
            if reviewable(current):
                outcome = (await self.reviewer.approve(t, u, current, rc.correlation_id)).value
        changed += await self.reviewer.promote(t, u, rc.correlation_id)
        return await self._changed(rc, u, habit.habit_id, outcome, changed)

    async def _check_replacement(self, rc: RpcContext, u: str, habit: Habit, other: Habit
                                 ) -> None:
        """Before `habit` supersedes `other` (which is archived at once): the replacement must
        be one that can guide. A candidate is checked for the law and a conflict as if `other`
        were gone already; one the law or a conflict would hold back is refused, so a
        supersede never leaves the person with neither habit. (A wait for evidence or for
        another duplicate decision is the person's to accept.)"""
        if habit.status not in (HabitStatus.CANDIDATE, HabitStatus.ACTIVE):
            raise _conflict(f"habit {habit.habit_id} is {habit.status.value}: only a candidate "
                            "or an active habit can supersede another; nothing changed")
        if not reviewable(habit):
            return
        rest = [x for x in await self.reviewer.habits(rc.tenant_id, u)
                if x.habit_id != other.habit_id]
        outcome, blocked, _, _ = await self.reviewer.decide(rc.tenant_id, u, habit, rest)
        if outcome in (ReviewStatus.APPROVED_PENDING_LAW, ReviewStatus.APPROVED_PENDING_CONFLICT):
            raise _conflict(f"habit {habit.habit_id} cannot supersede {other.habit_id}: its "
                            f"approval would be {outcome.value} ({', '.join(blocked)}); "
                            "nothing changed")

    async def _archive(self, rc: RpcContext, u: str, habit: Habit, reason: str | None
                       ) -> dict[str, Any]:
        """Archived, its pending duplicate pairs resolved as `archived_duplicate`; an approved
        habit that waited only for this one to be dealt with activates now."""
        if habit.status is HabitStatus.ARCHIVED:
            raise _conflict(f"habit {habit.habit_id} is already archived")
        await self._emit(rc, u, HabitRetired(habit_id=habit.habit_id, reason=reason))
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            pending = [x for x in await store.pairs(cur, rc.tenant_id, u)
                       if x.decision == "pending" and habit.habit_id in (x.first_id, x.second_id)]
        for pair in pending:
            await self._emit(rc, u, HabitDuplicateResolved(
                habit_id=pair.first_id, other_id=pair.second_id, decision="archived_duplicate"))
        changed = [habit.habit_id]
        if pending:
            changed += await self.reviewer.promote(rc.tenant_id, u, rc.correlation_id)
        return await self._changed(rc, u, habit.habit_id, "archived", changed)

    async def declare(self, p: h.Declare, rc: RpcContext) -> dict[str, Any]:
        """A person's own habit: approved at once (only the evidence rule is skipped), after
        the same law, conflict and duplicate checks; the encoder unavailable creates nothing."""
        t, u = rc.tenant_id, p.user_id
        async with self.reviewer.user_lock(t, u):
            habits = await self.reviewer.habits(t, u)
            same = identity(p.when, p.do, p.polarity)
            existing = next((x for x in habits if x.identity == same
                             and x.status is not HabitStatus.ARCHIVED), None)
            if existing is not None and existing.status is HabitStatus.ACTIVE:
                return await self._changed(rc, u, existing.habit_id, "active", [])
            if existing is None:
                probe = Habit(habit_id_for(t, u, p.when, p.do, p.polarity,
                                           {x.habit_id for x in habits}),
                              p.when, p.do, p.polarity, HabitStatus.CANDIDATE,
                              ReviewStatus.AWAITING_REVIEW, 10_000, "declared", time.time(),
                              time.time())
                await self.reviewer.decide(t, u, probe, habits)  # fails closed before creating
                await self._emit(rc, u, HabitSuggested(
                    habit_id=probe.habit_id, when=p.when, do=p.do, polarity=p.polarity,
                    confidence_bp=10_000, origin="declared"))
                existing = await self.reviewer.habit(t, u, probe.habit_id)
            if not reviewable(existing):
                raise _conflict(f"habit {existing.habit_id} is {existing.status.value}; "
                                + _REDECLARE.get(existing.status, "edit it instead"))
            # the person states this wording themselves: a suggestion of it still collecting
            # evidence is approved as a declaration (only the evidence rule is skipped)
            outcome = await self.reviewer.approve(
                t, u, dataclasses.replace(existing, origin="declared"), rc.correlation_id)
            return await self._changed(rc, u, existing.habit_id, outcome.value,
                                       [existing.habit_id])

    async def edit(self, p: h.Edit, rc: RpcContext) -> dict[str, Any]:
        async with self.reviewer.user_lock(rc.tenant_id, p.user_id):
            habit = await self._guarded(rc, p)
            if habit.status is HabitStatus.ARCHIVED:
                raise _conflict(f"habit {habit.habit_id} is archived")
            polarity = habit.polarity if p.polarity is None else p.polarity
            if (p.when, p.do, polarity) == (habit.condition, habit.behavior, habit.polarity):
                # the wording as it is: nothing to publish (the checksum others hold stays)
                return {"habit": as_result(habit), "outcome": "unchanged", "changed": []}
            await self._emit(rc, p.user_id, HabitEdited(
                habit_id=habit.habit_id, when=p.when, do=p.do, polarity=p.polarity))
            after = await self.reviewer.habit(rc.tenant_id, p.user_id, habit.habit_id)
            outcome = ("unchanged" if after.identity == habit.identity
                       else after.review_status.value)
            return {"habit": as_result(after), "outcome": outcome, "changed": [habit.habit_id]}

    async def enable(self, p: h.Guarded, rc: RpcContext) -> dict[str, Any]:
        t, u = rc.tenant_id, p.user_id
        async with self.reviewer.user_lock(t, u):
            habit = await self._guarded(rc, p)
            if habit.status is not HabitStatus.DISABLED or not habit.approved:
                raise _conflict(f"habit {habit.habit_id} is {habit.status.value}: only a "
                                "disabled, approved habit can be enabled")
            habits = await self.reviewer.habits(t, u)
            outcome, blocked, law, pairs = await self.reviewer.decide(t, u, habit, habits)
            if outcome not in (ReviewStatus.ACCEPTED_ACTIVE,
                               ReviewStatus.APPROVED_PENDING_ELIGIBILITY):
                await self.reviewer.record_pairs(t, u, pairs, rc.correlation_id)
                raise _conflict(f"habit {habit.habit_id} stays disabled: {outcome.value} "
                                f"({', '.join(blocked)})")
            await self._emit(rc, u, HabitEnabled(habit_id=habit.habit_id, law_hash=law.hash))
            return await self._changed(rc, u, habit.habit_id, "active", [habit.habit_id])

    async def disable(self, p: h.Guarded, rc: RpcContext) -> dict[str, Any]:
        async with self.reviewer.user_lock(rc.tenant_id, p.user_id):
            habit = await self._guarded(rc, p)
            if habit.status is not HabitStatus.ACTIVE:
                raise _conflict(f"habit {habit.habit_id} is {habit.status.value}: only an "
                                "active habit can be disabled")
            await self._emit(rc, p.user_id, HabitDisabled(habit_id=habit.habit_id,
                                                          reason=p.reason))
            return await self._changed(rc, p.user_id, habit.habit_id, "disabled",
                                       [habit.habit_id])

    async def archive(self, p: h.Guarded, rc: RpcContext) -> dict[str, Any]:
        async with self.reviewer.user_lock(rc.tenant_id, p.user_id):
            return await self._archive(rc, p.user_id, await self._guarded(rc, p), p.reason)

    async def set_law(self, p: h.SetLaw, rc: RpcContext) -> dict[str, Any]:
        """The law, then every active habit of the tenant it forbids suppressed."""
        try:
            law = parse_law(p.text)
        except ValueError as exc:
            raise RpcError("invalid_argument", f"text: {exc}") from None
        await self._emit(rc, TENANT_WIDE, HabitLawSet(text=law.text, law_hash=law.hash))
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            active = await store.active_in_tenant(cur, rc.tenant_id)
        suppressed = []
        for user_id, habit in active:
            denied = violations(law, habit.condition, habit.behavior)
            if denied:
                async with self.reviewer.user_lock(rc.tenant_id, user_id):
                    await self._emit(rc, user_id, HabitSuppressedByLaw(
                        habit_id=habit.habit_id, law_hash=law.hash, patterns=denied))
                suppressed.append(habit.habit_id)
        await self._after_law(rc, law)
        return {"law_hash": law.hash, "text": law.text, "suppressed": suppressed}

    async def _after_law(self, rc: RpcContext, law: Law) -> None:
        """What a law no longer forbids: an approved habit it had suppressed is restored,
        and approvals that waited for the law are checked again (with every other gate)."""
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            held = await store.active_in_tenant(cur, rc.tenant_id,
                                                ("suppressed_by_law", "candidate"))
        for user_id in sorted({u for u, x in held}):
            try:
                await self._after_law_for(rc, law, user_id, any(
                    x.review_status is ReviewStatus.APPROVED_PENDING_LAW
                    for u, x in held if u == user_id))
            except Shredded:
                continue  # erased meanwhile: their keys are gone, their habits going

    async def _after_law_for(self, rc: RpcContext, law: Law, user_id: str, waited: bool
                             ) -> None:
        """`_after_law` for one user (`waited`: an approval of theirs waited for the law)."""
        async with self.reviewer.user_lock(rc.tenant_id, user_id):
            habits = await self.reviewer.habits(rc.tenant_id, user_id)
            for habit in habits:
                if (habit.status is not HabitStatus.SUPPRESSED_BY_LAW or not habit.approved
                        or violations(law, habit.condition, habit.behavior)):
                    continue
                try:  # what was activated meanwhile may conflict with it or duplicate it
                    outcome, _, _, _ = await self.reviewer.decide(
                        rc.tenant_id, user_id, habit, habits)
                except RpcError:
                    continue  # the encoder is unavailable: it stays suppressed
                if outcome in (ReviewStatus.ACCEPTED_ACTIVE,
                               ReviewStatus.APPROVED_PENDING_ELIGIBILITY):
                    await self._emit(rc, user_id, HabitActivated(
                        habit_id=habit.habit_id, identity=habit.identity,
                        law_hash=law.hash))
            if waited:
                await self.reviewer.promote(rc.tenant_id, user_id, rc.correlation_id)

    async def configure(self, p: h.Configure, rc: RpcContext) -> dict[str, Any]:
        async with self.reviewer.pool.connection() as conn, conn.cursor() as cur:
            current = await store.tenant_settings(cur, rc.tenant_id)
        wanted = store.TenantSettings(
            current.retention_days if p.retention_days is None else p.retention_days,
            current.scheduled_analyze if p.scheduled_analyze is None else p.scheduled_analyze,
            current.project_names if p.project_names is None else tuple(p.project_names))
        if wanted != current:
            await self._emit(rc, TENANT_WIDE, HabitSettingsChanged(
                retention_days=wanted.retention_days,
                scheduled_analyze=wanted.scheduled_analyze,
                project_names=list(wanted.project_names)))
        return {"retention_days": wanted.retention_days,
                "scheduled_analyze": wanted.scheduled_analyze,
                "project_names": list(wanted.project_names)}

    async def analyze(self, p: h.Analyze, rc: RpcContext) -> dict[str, Any]:
        outcome = await self.analyzer.run(
            rc.tenant_id, p.user_id, max_records=p.max_records or MAX_BATCH_RECORDS,
            max_bytes=p.max_bytes or MAX_BATCH_BYTES, correlation_id=rc.correlation_id)
        return outcome.as_result()

    async def select(self, p: h.Select, rc: RpcContext) -> dict[str, Any]:
        choice = await self.selector.select(rc.tenant_id, p.user_id, p.request, p.context)
        return choice.as_result()


__all__ = ["PRODUCER", "HabitsRpc"]
