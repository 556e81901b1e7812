"""The extractor's worker: ticks for windows that stopped filling, and the LLM calls.

One replica works at a time (a leader lock), with at most `concurrency` calls in flight and one
per lane (a user's source and window kind) so each window gets the rolling summary its
predecessor left. For each window it reuses a stored answer when there is one (a redelivery, a
replay, a restart after a crash between the answer and the events), else asks the model, budget
permitting. The answer is stored before anything is published, in its own transaction: a call
that was paid for is never lost to a failed publish. The events are then published while the
window's row is locked, and the window is marked done in that transaction, so an erasure that
runs meanwhile either waits for the publish (and its second round removes what it caused) or
removes the window first (and nothing is published).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from habitus.crypto.keyring import Shredded
from habitus.db.leader import LeaderLock
from habitus.events import CATALOG
from habitus.events.ingest import ExtractionWindowDue
from habitus.ids import derived_event_id
from habitus.llm import BudgetExhausted, LlmClient, LlmError
from habitus.service.context import ServiceContext
from habitus.tasks import stop_task
from services.extractor import metrics, store
from services.extractor.consequences import (
    PRODUCER,
    bad_json_result,
    chunks_of,
    quarantine_rows,
    stored_result,
    window_events,
)
from services.extractor.material import SourceKey
from services.extractor.prompts import (
    EXTRACT_VERSION,
    EXTRACTION_SCHEMA,
    REFLECT_VERSION,
    REFLECTION_SCHEMA,
    extraction_messages,
    reflection_messages,
)
from services.extractor.settings import ExtractorSettings
from services.extractor.validation import validate_extraction, validate_reflection

log = logging.getLogger(__name__)
MAX_RETRY_SECONDS = 3600.0


def source_key(source: str) -> SourceKey:
    """The source a stored key names (the inverse of `SourceKey.key`)."""
    kind, _, rest = source.partition(":")
    if kind == "document":
        return SourceKey("document", rest)
    if kind == "email":
        return SourceKey("email", rest or "email")
    return SourceKey("conversations", "conversations")


def retry_delay(attempts: int, first: float, server_says: float | None) -> float:
    """Doubling from `first` per failed attempt, at most an hour; never sooner than the
    server (Retry-After) or the budget (midnight) said."""
    delay: float = min(MAX_RETRY_SECONDS, first * 2.0 ** max(0, attempts - 1))
    return max(delay, server_says or 0.0)


class Extractor:
    def __init__(self, ctx: ServiceContext, settings: ExtractorSettings, client: LlmClient,
                 clock: Callable[[], float] = time.time):
        self._ctx = ctx
        self._settings = settings
        self._client = client
        self._clock = clock
        self._lock = LeaderLock(str(ctx.pool.conninfo), "extractor.worker")
        self._task: asyncio.Task[None] | None = None
        self._ticked: dict[tuple[str, str, str, int], float] = {}
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="extractor.worker")

    async def stop(self) -> None:
        await stop_task(self._task)
        await self._lock.release()
        await self._client.aclose()

    def wake(self) -> None:
        """Look for work now rather than at the next sweep (a request was just queued)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                if await self._lock.try_acquire():
                    await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage pauses extraction; nothing is lost
                log.warning("extractor round failed", extra={"error": repr(exc)})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.sweep_seconds)
            self._wake.clear()

    async def round(self) -> int:
        """One pass: ticks, re-extraction requests, then every window that is due.
        Returns the windows finished."""
        await self.tick()
        await self.requeue()
        async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
            await metrics.refresh_backlog(cur)  # once a round: a count over every open window
        done = 0
        while True:
            async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
                heads = await store.next_windows(cur, self._clock(),
                                                 self._settings.concurrency)
            if not heads:
                return done
            results = await asyncio.gather(*(self.process(w) for w in heads))
            finished = sum(results)
            done += finished
            if finished == 0:
                return done  # every head is waiting (a failure, the budget): next round

    async def tick(self) -> None:
        """Publish a tick for each open window older than `window_seconds` (once per window:
        a copy of the tick closes nothing, and the stream drops re-published ids)."""
        now = self._clock()
        async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
            due = await store.due_ticks(cur, now - self._settings.window_seconds)
        for tenant_id, user_id, source, opened_seq in due:
            key = (tenant_id, user_id, source, opened_seq)
            if now - self._ticked.get(key, -1e18) < 120:
                continue
            event = CATALOG.new(
                ExtractionWindowDue(source=source, window_opened_seq=opened_seq),
                tenant_id=tenant_id, user_id=user_id, producer=PRODUCER, occurred_at=now,
                event_id=derived_event_id("extraction-due", *map(str, key)))
            await self._ctx.publisher.publish(event)
            self._ticked[key] = now
        self._ticked = {k: at for k, at in self._ticked.items() if now - at < 600}

    async def requeue(self) -> None:
        async with self._ctx.pool.connection() as conn:
            async with conn.cursor() as cur:
                requests = await store.unhandled_requests(cur)
            for tenant_id, user_id, seq, since, version, source in requests:
                async with conn.transaction(), conn.cursor() as cur:
                    moved = await store.requeue(cur, tenant_id, user_id, seq, since, version,
                                                source)
                log.info("windows queued for re-extraction",
                         extra={"tenant_id": tenant_id, "windows": moved,
                                "prompt_version": version})

    async def process(self, w: store.WindowRow) -> int:
        """Finish one window; 1 when it is done, 0 when it waits or was erased meanwhile."""
        current = REFLECT_VERSION if w.kind == "reflect" else EXTRACT_VERSION
        try:
            async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
                wanted = await store.wanted_version(cur, w) if w.kind == "extract" else None
                stored = await store.stored_answer(cur, w, wanted)
                summary = await store.rolling_summary(cur, w) if w.kind == "extract" else None
        except Shredded:
            # the user was erased since the window was read (their stored answer or summary
            # no longer opens): their erasure removes the window, nothing is to be done
            metrics.WINDOWS.labels(w.kind, "erased").inc()
            return 0
        if stored is not None:
            metrics.WINDOWS.labels(w.kind, "reused").inc()
        else:
            stored = await self._ask(w, wanted or current, summary)
            if stored is None:
                return 0
        return await self._publish(w, stored)

    async def _ask(self, w: store.WindowRow, version: str, summary: str | None
                   ) -> store.Stored | None:
        chunks = chunks_of(w.pieces)
        if w.kind == "reflect":
            system, user = reflection_messages(chunks)
            schema, name = REFLECTION_SCHEMA, "reflection"
        else:
            system, user = extraction_messages(source_key(w.source), summary, chunks)
            schema, name = EXTRACTION_SCHEMA, "extraction"
        now = self._clock()
        try:
            answer = await self._client.complete_json(
                tenant_id=w.tenant_id, system=system, user=user, schema=schema,
                schema_name=name)
        except BudgetExhausted as exc:
            await self._wait(w, now + (exc.retry_after or 3600.0), "budget", count=False)
            metrics.WINDOWS.labels(w.kind, "budget").inc()
            return None
        except LlmError as exc:
            if exc.reason != "bad_json":
                delay = retry_delay(w.attempts + 1, self._settings.retry_seconds,
                                    exc.retry_after)
                await self._wait(w, now + delay, exc.reason)
                metrics.WINDOWS.labels(w.kind, "failed").inc()
                return None
            result, quarantined = bad_json_result(exc.content or "")
            stored = store.Stored(version, self._settings.llm.model or "unknown", result)
            raw, tokens = exc.content or "", (exc.tokens_in, exc.tokens_out)
        else:
            check = validate_reflection if w.kind == "reflect" else validate_extraction
            validated = check(answer.data, chunks)
            stored = store.Stored(version, answer.model or self._settings.llm.model or "unknown",
                                  stored_result(validated))
            quarantined = quarantine_rows(validated)
            raw, tokens = answer.content, (answer.tokens_in, answer.tokens_out)
        async with self._ctx.pool.connection() as conn, conn.transaction(), \
                conn.cursor() as cur:
            if not await store.window_exists(cur, w):
                metrics.WINDOWS.labels(w.kind, "erased").inc()
                return None  # the user was erased while the model answered
            await store.store_answer(cur, w, stored, raw, *tokens, self._clock(), quarantined)
        for _, reason, _, _ in quarantined:
            metrics.QUARANTINED.labels(reason).inc()
        metrics.WINDOWS.labels(w.kind, "extracted").inc()
        return stored

    async def _wait(self, w: store.WindowRow, until: float, reason: str, *, count: bool = True
                    ) -> None:
        async with self._ctx.pool.connection() as conn, conn.transaction(), \
                conn.cursor() as cur:
            await store.mark_waiting(cur, w, until, reason, count_attempt=count)

    async def _publish(self, w: store.WindowRow, stored: store.Stored) -> int:
        events = window_events(w, stored.result, stored.prompt_version, stored.model)
        async with self._ctx.pool.connection() as conn, conn.transaction(), \
                conn.cursor() as cur:
            if not await store.window_exists(cur, w):
                return 0
            for event in events:
                await self._ctx.publisher.publish(event)
            summary = stored.result.get("summary") if w.kind == "extract" else None
            await store.mark_done(cur, w, summary, self._clock())
        metrics.CANDIDATES.labels(w.kind).inc(max(0, len(events) - 1))
        return 1

