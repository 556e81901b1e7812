"""`habits.select`: which approved habits apply to the request a user makes now.

Fail closed at every step: without the encoder, the judge, or a stable ledger there is no
guidance, never a guess. The steps: the eligible habits (active, checked against the tenant's
current law, confidence >= 7500, staleness <= 0.8; the top 100 by confidence then id); those
whose condition is nearest the request (>= 1500 bp, the top 12); one judge call over
process-local aliases that must cover each candidate exactly once; at most 3 chosen; each
re-read before use, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from habitus.events.domain import HabitStatus
from habitus.llm import LlmClient, LlmError
from services.habits import metrics, store
from services.habits.embedding import Embedder, EmbedderUnavailable
from services.habits.identity import normalise
from services.habits.judge import (
    JUDGE_OUTPUT_SCHEMA,
    MAX_SELECTED,
    Aliases,
    judge_payload,
    parse_judgment,
)
from services.habits.law import parse_law
from services.habits.ledger import Habit
from services.habits.prompts import judge_messages
from services.habits.review import staleness
from services.habits.scoring import AFFIRMATION_MIN_BP, MAX_STALENESS
from services.habits.wording import do_line, when_line

if TYPE_CHECKING:  # numpy arrives with the vectors (see embedding.py)
    import numpy as np

log = logging.getLogger(__name__)

MAX_ELIGIBLE = 100
RETRIEVAL_FLOOR_BP = 1500
RETRIEVE_TOP = 12
MAX_SECTION_CHARS = 2000
HEADING = "## Approved habits"
HEADER = ("Habits this user approved that apply to this request. They are bounded guidance "
          "for this answer only: the user's direct instructions and the platform's rules "
          "come first.")


@dataclass(frozen=True)
class Choice:
    habits: tuple[Habit, ...]
    reason: str | None = None

    def as_result(self) -> dict[str, Any]:
        shown = fitting(self.habits)  # what the section holds is what steered
        return {"habits": [{"habit_id": h.habit_id, "when": h.condition, "do": h.behavior,
                            "polarity": h.polarity}
                           for h in shown],
                "section": render(shown),
                "steered_by": [when_line(h.condition) for h in shown],
                "reason": self.reason}


def _pair(h: Habit) -> str:
    return f"- {when_line(h.condition)}\n  {do_line(h.behavior, h.polarity)}"


def fitting(habits: Sequence[Habit]) -> list[Habit]:
    """The habits, in order, whose pairs fit the section's characters with the heading."""
    size = len(f"{HEADING}\n\n{HEADER}\n")
    kept = []
    for h in habits:
        size += len(_pair(h)) + 1
        if size > MAX_SECTION_CHARS:
            break
        kept.append(h)
    return kept


def render(habits: Sequence[Habit]) -> str:
    shown = fitting(habits)
    if not shown:
        return ""
    return "\n".join([HEADING, "", HEADER, *(_pair(h) for h in shown)]) + "\n"


def eligible(habits: Sequence[Habit], law_hash: str, now: float) -> list[Habit]:
    kept = [h for h in habits if h.status.value == "active" and h.approved
            and h.law_hash == law_hash and h.confidence_bp >= AFFIRMATION_MIN_BP
            and staleness(h, now) <= MAX_STALENESS]
    kept.sort(key=lambda h: (-h.confidence_bp, h.habit_id))
    return kept[:MAX_ELIGIBLE]


def nearest(request_vector: np.ndarray, habits: Sequence[Habit],
            condition_vectors: Sequence[np.ndarray]) -> list[Habit]:
    scored = []
    for habit, vector in zip(habits, condition_vectors, strict=True):
        bp = math.floor(float(request_vector @ vector) * 10_000)
        if bp >= RETRIEVAL_FLOOR_BP:
            scored.append((-bp, habit.habit_id, habit))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [h for _, _, h in scored[:RETRIEVE_TOP]]


class Selector:
    def __init__(self, pool: AsyncConnectionPool[Any], embedder: Embedder | None,
                 llm: LlmClient | None, judge_timeout: float = 20.0):
        self._pool = pool
        self._embedder = embedder
        self._llm = llm
        self._timeout = judge_timeout

    async def select(self, tenant_id: str, user_id: str, request: str,
                     context: Sequence[str]) -> Choice:
        started = time.perf_counter()
        try:
            choice = await self._select(tenant_id, user_id, request, context)
        finally:
            metrics.SELECT_SECONDS.observe(time.perf_counter() - started)
        metrics.SELECTIONS.labels(outcome="steered" if choice.habits else (
            choice.reason or "none").split(":")[0]).inc()
        return choice

    async def _snapshot(self, tenant_id: str, user_id: str) -> tuple[str, list[Habit]]:
        async with self._pool.connection() as conn, conn.cursor() as cur:
            stored = await store.law(cur, tenant_id)
            habits = await store.load_habits(cur, tenant_id, user_id, ["active"])
        return parse_law(None if stored is None else stored[0]).hash, habits

    async def _select(self, tenant_id: str, user_id: str, request: str,
                      context: Sequence[str]) -> Choice:
        if self._embedder is None:
            return Choice((), "unavailable: the sentence encoder is off")
        if self._llm is None:
            return Choice((), "unavailable: no LLM endpoint for the judge")
        law_hash, active = await self._snapshot(tenant_id, user_id)
        now = time.time()
        candidates = eligible(active, law_hash, now)
        if not candidates:
            return Choice((), "no_candidates")
        try:
            asked = await self._embedder.embed([normalise(request)], keep=False)
            vectors = [*asked, *await self._embedder.embed(
                [normalise(h.condition) for h in candidates], owner=(tenant_id, user_id))]
        except EmbedderUnavailable as exc:
            return Choice((), f"unavailable: {exc}")
        retrieved = nearest(vectors[0], candidates, vectors[1:])
        if not retrieved:
            return Choice((), "no_candidates")
        aliases = Aliases([h.habit_id for h in retrieved])
        payload, aliases = judge_payload(request, list(context)[-4:],
                                         [(h.habit_id, h.condition) for h in retrieved], aliases)
        system, user = (m["content"] for m in judge_messages(payload))
        try:
            completion = await asyncio.wait_for(self._llm.complete_json(
                tenant_id=tenant_id, system=system, user=user, schema=JUDGE_OUTPUT_SCHEMA,
                schema_name="habit_judgment"), self._timeout)
        except (LlmError, TimeoutError) as exc:
            log.info("the habit judge failed: no guidance", extra={"error": str(exc)})
            return Choice((), "unavailable: the judge failed")
        chosen = parse_judgment(completion.data, aliases)
        if chosen is None:
            return Choice((), "invalid_judgment")
        if not chosen:
            return Choice((), "none")
        chosen = chosen[:MAX_SELECTED]
        return await self._revalidated(tenant_id, user_id, chosen,
                                       {h.habit_id: h for h in retrieved})

    async def _revalidated(self, tenant_id: str, user_id: str, chosen: Sequence[str],
                           seen: dict[str, Habit]) -> Choice:
        """Re-read what the judge chose: any change since the snapshot means no guidance."""
        async with self._pool.connection() as conn, conn.cursor() as cur:
            stored = await store.law(cur, tenant_id)
            now_by_id = await store.habits_by_id(cur, tenant_id, user_id, chosen)
        law_hash = parse_law(None if stored is None else stored[0]).hash
        out = []
        for habit_id in chosen:
            before, now = seen[habit_id], now_by_id.get(habit_id)
            if (now is None or now.status is not HabitStatus.ACTIVE
                    or now.checksum != before.checksum or now.law_hash != law_hash
                    or not now.approved or normalise(now.condition) != normalise(
                        before.condition)):
                return Choice((), "drift: a chosen habit changed meanwhile")
            out.append(now)
        return Choice(tuple(out))
