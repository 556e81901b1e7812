"""Analyze: a user's unread observations, read by the model, become suggestions.

A run takes the unread queue as it stands when it starts (later turns wait for the next run)
and drains it in bounded batches, one model call each. A batch's answer is stored before any
of its consequences are published, its events have ids derived from the batch, and its
watermark advances only after they are applied: a batch retried after a crash or a failure
reuses the stored answer and publishes the same events (which the stream and the ledger
drop), and a failed batch leaves every earlier one committed.

What the model proposes is validated before anything is published; what fails validation is
quarantined with the reason. A proposal with the wording of a known habit adds support to it;
a new one is suggested (and checked for duplicates among the approved habits when the encoder
is on). A strong contradiction of exactly one active habit puts it to sleep, and the
replacement stays a suggestion for a person to review. Nothing here approves anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from habitus.crypto.columns import COLUMNS
from habitus.db import locks
from habitus.events.domain import (
    HabitDormant,
    HabitEvidenceAdded,
    HabitStatus,
    HabitSuggested,
    HabitSupport,
    ReviewStatus,
)
from habitus.events.envelope import Payload
from habitus.ids import derived_event_id
from habitus.llm import LlmClient, LlmError
from services.habits import metrics, store
from services.habits.batching import MAX_BATCH_BYTES, MAX_BATCH_RECORDS, batches
from services.habits.embedding import EmbedderUnavailable
from services.habits.identity import identity, sha256
from services.habits.ledger import Habit, Support, merge_support
from services.habits.prompts import ANALYZE_PROMPT_VERSION, analyze_messages
from services.habits.proposals import ANALYZE_OUTPUT_SCHEMA, Proposal, RefInfo, validate_output
from services.habits.redaction import redact
from services.habits.review import wording
from services.habits.reviewer import Reviewer
from services.habits.scoring import contradicted, eligible

log = logging.getLogger(__name__)

PRODUCER = "habits.analyze"
#: habits shown to the model as what it already knows (compact: wording only)
MAX_KNOWN = 50


@dataclass
class Outcome:
    batches: int = 0
    records: int = 0
    suggested: int = 0
    evidence_added: int = 0
    quarantined: int = 0
    dormant: int = 0
    activated: int = 0
    remaining: int = 0
    error: str | None = None

    def as_result(self) -> dict[str, Any]:
        return dict(self.__dict__)


def scrubbed(item: Any) -> Any:
    """A refused item as the quarantine keeps it: every string redacted (an item refused for
    holding a secret must not keep it)."""
    if isinstance(item, str):
        return redact(item)
    if isinstance(item, list):
        return [scrubbed(x) for x in item]
    if isinstance(item, dict):
        return {redact(str(k)): scrubbed(v) for k, v in item.items()}
    return item


def habit_id_for(tenant_id: str, user_id: str, condition: str, behavior: str, polarity: int,
                 taken: set[str]) -> str:
    """Derived from the wording, so the same proposal gets the same id on a retry; a
    different habit that already holds it (one reworded since) makes the next one.

    Derived through the user's column key (the wording's identity sealed, which is
    deterministic): the id is a plain column everywhere, and a bare hash of the wording would
    confirm a guessed wording in any copy of the rows, long after the user's erasure."""
    key = COLUMNS.seal(tenant_id, user_id, identity(condition, behavior, polarity))
    n = 0
    while True:
        candidate = "h_" + sha256(f"{key}:{n}")[:20]
        if candidate not in taken:
            return candidate
        n += 1


class Analyzer:
    def __init__(self, reviewer: Reviewer, llm: LlmClient | None):
        self.reviewer = reviewer
        self.llm = llm

    def _one_run(self, tenant_id: str, user_id: str) -> AbstractAsyncContextManager[None]:
        """One Analyze of a user at a time (another replica's waits): two would ask the
        model for the same batches. Reviews are not held up by it; only each batch's commit
        takes the user's lock."""
        return locks.held(self.reviewer.pool, f"habits.analyze/{tenant_id}/{user_id}")

    async def run(self, tenant_id: str, user_id: str, *, max_records: int = MAX_BATCH_RECORDS,
                  max_bytes: int = MAX_BATCH_BYTES, one_batch: bool = False,
                  correlation_id: str | None = None) -> Outcome:
        """Drain what is unread now (one batch if `one_batch`)."""
        outcome = Outcome()
        pool = self.reviewer.pool
        async with self._one_run(tenant_id, user_id):
            async with pool.connection() as conn, conn.cursor() as cur:
                upto = await store.last_observed(cur, tenant_id, user_id)
                after = await store.watermark(cur, tenant_id, user_id)
                rows = await store.unread(cur, tenant_id, user_id, after, upto)
                settings = await store.tenant_settings(cur, tenant_id)
            if rows and self.llm is None:
                outcome.error = "no LLM endpoint: set HABITUS_LLM_BASE_URL and HABITUS_LLM_MODEL"
            else:
                for batch in batches(rows, lambda o: o.bytes, max_records, max_bytes):
                    try:
                        known = [h for h in await self.reviewer.habits(tenant_id, user_id)
                                 if h.status in (HabitStatus.ACTIVE, HabitStatus.CANDIDATE)]
                        model, data = await self._answer(tenant_id, user_id, batch, known)
                    except LlmError as exc:
                        metrics.BATCHES.labels(outcome="failed").inc()
                        outcome.error = f"the model call failed ({exc.reason}): {exc}"
                        break
                    async with self.reviewer.user_lock(tenant_id, user_id):
                        await self._commit(tenant_id, user_id, batch, model, data, settings,
                                           outcome, correlation_id)
                    outcome.batches += 1
                    outcome.records += len(batch)
                    if one_batch:
                        break
            if outcome.batches:
                async with self.reviewer.user_lock(tenant_id, user_id):
                    promoted = await self.reviewer.promote(tenant_id, user_id, correlation_id)
                outcome.activated = len(promoted)
            async with pool.connection() as conn, conn.cursor() as cur:
                done = await store.watermark(cur, tenant_id, user_id)
                outcome.remaining = await store.count_unread(cur, tenant_id, user_id, done,
                                                             upto)
        return outcome

    async def _answer(self, tenant_id: str, user_id: str, batch: Sequence[store.Observation],
                      known: Sequence[Habit]) -> tuple[str, Any]:
        first, last = batch[0].seq, batch[-1].seq
        pool = self.reviewer.pool
        async with pool.connection() as conn, conn.cursor() as cur:
            stored = await store.stored_answer(cur, tenant_id, user_id, first, last,
                                               ANALYZE_PROMPT_VERSION)
        if stored is not None:
            metrics.BATCHES.labels(outcome="reused").inc()
            return stored
        assert self.llm is not None
        messages = analyze_messages(
            [(f"r{i}", o.text) for i, o in enumerate(batch, start=1)],
            [(h.condition, h.behavior, h.polarity) for h in known[:MAX_KNOWN]])
        system, user = (m["content"] for m in messages)
        completion = await self.llm.complete_json(
            tenant_id=tenant_id, system=system, user=user, schema=ANALYZE_OUTPUT_SCHEMA,
            schema_name="habit_proposals")
        async with pool.connection() as conn, conn.cursor() as cur:
            await store.store_answer(cur, tenant_id, user_id, first, last,
                                     ANALYZE_PROMPT_VERSION, completion.model, completion.data,
                                     time.time())
        metrics.BATCHES.labels(outcome="committed").inc()
        return completion.model, completion.data

    async def _commit(self, tenant_id: str, user_id: str, batch: Sequence[store.Observation],
                      model: str, data: Any, settings: store.TenantSettings, outcome: Outcome,
                      correlation_id: str | None) -> None:
        """Under the user's lock: what the answer says, validated, published, and the
        batch's watermark advanced."""
        refs = {f"r{i}": RefInfo(f"r{i}", o.seq, o.event_id, o.day)
                for i, o in enumerate(batch, start=1)}
        proposals, rejected = validate_output(data, refs, settings.project_names)
        first, last = batch[0].seq, batch[-1].seq
        pool = self.reviewer.pool
        if rejected:
            async with pool.connection() as conn, conn.cursor() as cur:
                await store.quarantine(cur, tenant_id, user_id, first, last,
                                       [(r.reason, scrubbed(r.item)) for r in rejected], model,
                                       time.time())
            outcome.quarantined += len(rejected)
            metrics.PROPOSALS.labels(outcome="quarantined").inc(len(rejected))
        for position, proposal in enumerate(proposals):
            events = self._consequences(tenant_id, user_id, proposal,
                                        await self.reviewer.habits(tenant_id, user_id), outcome)
            for n, payload in enumerate(events):
                await self.reviewer.publish(
                    tenant_id, user_id, payload, correlation_id=correlation_id,
                    producer=PRODUCER, event_id=derived_event_id(
                        "habits.analyze", tenant_id, user_id, str(first), str(last),
                        str(position), str(n), type(payload).__name__))
            await self._pairs(tenant_id, user_id, events, correlation_id)
        async with pool.connection() as conn, conn.cursor() as cur:
            await store.advance_watermark(cur, tenant_id, user_id, last, time.time())

    def _consequences(self, tenant_id: str, user_id: str, p: Proposal, habits: Sequence[Habit],
                      outcome: Outcome) -> list[Payload]:
        support = [HabitSupport(ref=r.event_id, day=r.day, polarity=1,
                                confidence_bp=p.confidence_bp) for r in p.refs]
        same = identity(p.condition, p.behavior, p.polarity)
        known = next((h for h in habits if h.identity == same
                      and h.status is not HabitStatus.ARCHIVED), None)
        if known is not None:
            new = [s for s in support if s.ref not in {x.ref for x in known.support}]
            if not new:
                return []
            outcome.evidence_added += 1
            metrics.PROPOSALS.labels(outcome="evidence").inc()
            return [HabitEvidenceAdded(habit_id=known.habit_id, support=new,
                                       confidence_bp=max(known.confidence_bp, p.confidence_bp))]
        if any(h.identity == same for h in habits):
            return []  # a person archived or rejected this wording: not suggested again
        events: list[Payload] = []
        habit_id = habit_id_for(tenant_id, user_id, p.condition, p.behavior, p.polarity,
                                {h.habit_id for h in habits})
        active = [wording(h) for h in habits if h.status is HabitStatus.ACTIVE]
        dormant = contradicted((p.condition, p.behavior, p.polarity), p.confidence_bp,
                               p.contradicts, active)
        refs = merge_support((), (Support(s.ref, s.day) for s in support))
        events.append(HabitSuggested(
            habit_id=habit_id, when=p.condition, do=p.behavior, polarity=p.polarity,
            support=support, confidence_bp=p.confidence_bp, origin="analyze",
            review_status=ReviewStatus.AWAITING_REVIEW if eligible(
                [(s.ref, s.day) for s in refs]) else ReviewStatus.COLLECTING_EVIDENCE))
        outcome.suggested += 1
        metrics.PROPOSALS.labels(outcome="suggested").inc()
        if dormant is not None:
            events.append(HabitDormant(habit_id=dormant, replaced_by=habit_id))
            outcome.dormant += 1
            metrics.PROPOSALS.labels(outcome="contradiction").inc()
        elif p.contradicts:
            # a weaker contradiction: evidence against the opposite habit, which ages it
            for h in habits:
                if (h.status is HabitStatus.ACTIVE and h.polarity == -p.polarity
                        and identity(h.condition, h.behavior, p.polarity) == same):
                    events.append(HabitEvidenceAdded(habit_id=h.habit_id, support=[
                        HabitSupport(ref=s.ref, day=s.day, polarity=-1,
                                     confidence_bp=s.confidence_bp) for s in support]))
        return events

    async def _pairs(self, tenant_id: str, user_id: str, events: Sequence[Payload],
                     correlation_id: str | None) -> None:
        """A new suggestion's possible duplicates among the approved habits, for review."""
        for payload in events:
            if not isinstance(payload, HabitSuggested) or self.reviewer.embedder is None:
                continue
            habits = await self.reviewer.habits(tenant_id, user_id)
            target = next((h for h in habits if h.habit_id == payload.habit_id), None)
            if target is None:
                continue
            try:
                pairs = await self.reviewer.duplicates(tenant_id, user_id, target, habits)
            except EmbedderUnavailable as exc:
                log.info("no duplicate check for a suggestion", extra={"error": str(exc)})
                continue
            await self.reviewer.record_pairs(tenant_id, user_id, pairs, correlation_id)
