"""The decisions every change of a user's habits goes through, for the API and Analyze alike.

One writer per user at a time: each change holds a Postgres advisory lock on (tenant, user)
from reading the ledger to the ledger having applied its events, so two approvals of
duplicates racing on two replicas are decided one after the other, and the second sees the
first active (exactly one wins). The lock is a transaction lock on a connection of its own:
it is released when the change ends, or when the process dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from habitus.bus.rpc import RpcError
from habitus.db import locks
from habitus.events import CATALOG
from habitus.events.domain import (
    HabitActivated,
    HabitApproved,
    HabitDuplicateFound,
    ReviewStatus,
)
from habitus.events.envelope import Payload
from habitus.service.command import Commands
from services.habits import store
from services.habits.duplicates import (
    MAX_SCAN_HABITS,
    ScanTooLarge,
    Thresholds,
    embed_habits,
    matches,
)
from services.habits.embedding import Embedder, EmbedderUnavailable
from services.habits.law import Law, parse_law
from services.habits.ledger import Habit
from services.habits.review import COMPARED, gate, waiting

PRODUCER = "habits"


class Reviewer:
    def __init__(self, pool: AsyncConnectionPool[Any], commands: Commands,
                 embedder: Embedder | None, thresholds: Thresholds | None = None):
        self.pool = pool
        self.commands = commands
        self.embedder = embedder
        self.thresholds = thresholds or Thresholds()

    def user_lock(self, tenant_id: str, user_id: str) -> AbstractAsyncContextManager[None]:
        return locks.held(self.pool, f"habits/{tenant_id}/{user_id}")

    async def publish(self, tenant_id: str, user_id: str, payload: Payload, *,
                      correlation_id: str | None = None, event_id: str | None = None,
                      producer: str = PRODUCER) -> None:
        """The change as an event, answered once the ledger (and its readers) applied it."""
        event = CATALOG.new(payload, tenant_id=tenant_id, user_id=user_id, producer=producer,
                            event_id=event_id, correlation_id=correlation_id)
        await self.commands.run(event)

    async def law(self, tenant_id: str) -> Law:
        async with self.pool.connection() as conn, conn.cursor() as cur:
            stored = await store.law(cur, tenant_id)
        return parse_law(None if stored is None else stored[0])

    async def habits(self, tenant_id: str, user_id: str) -> list[Habit]:
        async with self.pool.connection() as conn, conn.cursor() as cur:
            return await store.load_habits(cur, tenant_id, user_id)

    async def habit(self, tenant_id: str, user_id: str, habit_id: str) -> Habit:
        async with self.pool.connection() as conn, conn.cursor() as cur:
            habit = await store.load_habit(cur, tenant_id, user_id, habit_id)
        if habit is None:
            raise RpcError("not_found", f"no habit {habit_id!r} for this user")
        return habit

    async def resolved(self, tenant_id: str, user_id: str) -> set[frozenset[str]]:
        """Pairs a person already decided about (kept separate, ...): not duplicates again."""
        async with self.pool.connection() as conn, conn.cursor() as cur:
            rows = await store.pairs(cur, tenant_id, user_id)
        return {frozenset((p.first_id, p.second_id)) for p in rows if p.decision != "pending"}

    async def duplicates(self, tenant_id: str, user_id: str, target: Habit,
                         habits: Sequence[Habit]) -> list[tuple[str, str, int, bool]]:
        """Possible duplicates of `target` among the approved habits (active or disabled, same
        polarity), each as the canonical pair; raises EmbedderUnavailable (fail closed).

        The target is embedded even with nothing to compare it with: an encoder that cannot
        embed fails the check whatever the user already has, so a broken encoder activates
        nothing (not even a user's first habit), exactly like an encoder switched off."""
        if self.embedder is None:
            raise EmbedderUnavailable("the sentence encoder is off (HABITUS_HABITS_SEMANTIC)")
        decided = await self.resolved(tenant_id, user_id)
        others = [h for h in habits if h.habit_id != target.habit_id and h.status in COMPARED
                  and h.polarity == target.polarity
                  and frozenset((h.habit_id, target.habit_id)) not in decided]
        if len(others) >= MAX_SCAN_HABITS:
            raise ScanTooLarge(len(others) + 1)  # the target and what it is compared with
        embedded = await embed_habits(self.embedder, [
            (h.habit_id, h.polarity, h.created_at, h.condition, h.behavior)
            for h in (target, *others)], owner=(tenant_id, user_id))
        return [(p.first, p.second, p.similarity_bp, p.strong)
                for p in matches(embedded[0], embedded[1:], self.thresholds)]

    async def decide(self, tenant_id: str, user_id: str, habit: Habit,
                     habits: Sequence[Habit]) -> tuple[ReviewStatus, tuple[str, ...],
                                                       Law, list[tuple[str, str, int, bool]]]:
        law = await self.law(tenant_id)
        try:
            pairs = await self.duplicates(tenant_id, user_id, habit, habits)
        except ScanTooLarge as exc:
            raise RpcError("conflict", str(exc)) from None
        except EmbedderUnavailable as exc:
            raise RpcError("unavailable", f"duplicate checks cannot run, so nothing is "
                                          f"activated: {exc}") from None
        ids = tuple(b if a == habit.habit_id else a for a, b, _, _ in pairs)
        outcome, blocked = gate(habit, law=law, comparators=habits, duplicate_ids=ids)
        return outcome, blocked, law, pairs

    async def record_pairs(self, tenant_id: str, user_id: str,
                           pairs: Sequence[tuple[str, str, int, bool]],
                           correlation_id: str | None) -> None:
        for first, second, bp, strong in pairs:
            await self.publish(tenant_id, user_id, HabitDuplicateFound(
                habit_id=first, other_id=second, similarity_bp=bp, strong=strong),
                correlation_id=correlation_id)

    async def approve(self, tenant_id: str, user_id: str, habit: Habit,
                      correlation_id: str | None) -> ReviewStatus:
        habits = await self.habits(tenant_id, user_id)
        outcome, blocked, law, pairs = await self.decide(tenant_id, user_id, habit, habits)
        await self.record_pairs(tenant_id, user_id, pairs, correlation_id)
        await self.publish(tenant_id, user_id, HabitApproved(
            habit_id=habit.habit_id, identity=habit.identity, outcome=outcome,
            law_hash=law.hash, blocked_by=list(blocked),
            declared=habit.origin == "declared"), correlation_id=correlation_id)
        return outcome

    async def promote(self, tenant_id: str, user_id: str, correlation_id: str | None
                      ) -> list[str]:
        """Activate every approved habit whose wait is over (after Analyze brought evidence,
        after a duplicate was resolved). A habit still held back stays as it is; with the
        encoder unavailable nothing is promoted."""
        activated: list[str] = []
        for habit in [h for h in await self.habits(tenant_id, user_id) if waiting(h)]:
            habits = await self.habits(tenant_id, user_id)
            try:
                outcome, blocked, law, pairs = await self.decide(tenant_id, user_id, habit,
                                                                 habits)
            except RpcError:
                return activated
            if outcome is ReviewStatus.ACCEPTED_ACTIVE:
                await self.publish(tenant_id, user_id, HabitActivated(
                    habit_id=habit.habit_id, identity=habit.identity, law_hash=law.hash),
                    correlation_id=correlation_id)
                activated.append(habit.habit_id)
            elif (outcome, blocked) != (habit.review_status, habit.blocked_by):
                # still waiting, now for something else (the duplicate it waited for was
                # archived, and it duplicates another approved habit): the approval stands,
                # and shows what it waits for now, with the new pair up for review
                await self.record_pairs(tenant_id, user_id, pairs, correlation_id)
                await self.publish(tenant_id, user_id, HabitApproved(
                    habit_id=habit.habit_id, identity=habit.identity, outcome=outcome,
                    law_hash=law.hash, blocked_by=list(blocked)), correlation_id=correlation_id)
        return activated

