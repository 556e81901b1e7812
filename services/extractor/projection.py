"""The extractor's two folds.

`extractor.windows` reads the user's material from HABITUS_INGEST (turns, emails, document
chunks) and the extractor's own ticks, and keeps each source's open window and the windows that
closed (see `windowing`); a complex turn also makes a one-turn reflection window, at most
`max_reflections_per_session` per session. It publishes nothing itself: the LLM is called by
the worker, outside any batch, because a model answers in seconds and a fold must not wait on
it. `extractor.requests` folds operators' re-extraction requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.crypto.columns import COLUMNS, ColumnMemo
from habitus.events.domain import ReextractionRequested
from habitus.events.ingest import (
    DocumentIngested,
    EmailObserved,
    ExtractionWindowDue,
    TurnRecorded,
)
from habitus.projection import ApplyContext, Delivered, Projection
from services.extractor import store
from services.extractor.material import drafts_of, is_complex_turn, source_of
from services.extractor.settings import ExtractorSettings
from services.extractor.windowing import (
    ClosedWindow,
    Limits,
    OpenWindow,
    Piece,
    add_material,
    reflection,
    tick,
)


def _pieces(d: Delivered) -> list[Piece]:
    drafts = drafts_of(d.event.payload, occurred_at=d.event.occurred_at)
    return [Piece(draft, d.event.event_id, d.seq) for draft in drafts]


class WindowsProjection(Projection):
    name = "extractor.windows"
    schema = store.SCHEMA
    tables = (store.OPEN_WINDOWS, store.WINDOWS, store.REFLECTION_COUNTS)
    # the worker's: answers paid for, what validation refused, the rolling summaries
    also_holds = (store.EXTRACTIONS, store.QUARANTINE, store.SOURCES)

    def __init__(self, settings: ExtractorSettings | None = None):
        settings = settings or ExtractorSettings()
        self.limits = Limits(settings.window_tokens, settings.window_seconds,
                             settings.window_max_chunks)
        self.max_reflections = settings.max_reflections_per_session
        # one batch's state: loaded once per batch, written back before it commits
        self._open: dict[store.SourceKey, OpenWindow | None] = {}
        self._loaded: dict[store.SourceKey, OpenWindow] = {}
        self._closed: list[tuple[str, str, ClosedWindow]] = []
        self._reflections: dict[tuple[str, str, str], int] = {}
        self._texts = ColumnMemo(COLUMNS)

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        sources = {self._source_key(d) for d in batch}
        sessions = {(d.event.tenant_id, d.event.user_id, d.event.payload.session_id)
                    for d in batch if isinstance(d.event.payload, TurnRecorded)}
        self._texts = ColumnMemo(COLUMNS)  # a batch's: it must not outlive an erasure
        self._loaded = await store.load_open(cur, sources)
        self._open = {k: self._loaded.get(k) for k in sources}
        self._closed = []
        self._reflections = {k: 0 for k in sessions} | await store.load_reflections(
            cur, sessions)
        await super().apply_batch(cur, batch, ctx)

    @staticmethod
    def _source_key(d: Delivered) -> store.SourceKey:
        payload = d.event.payload
        source = (payload.source if isinstance(payload, ExtractionWindowDue)
                  else source_of(payload).key)
        return d.event.tenant_id, d.event.user_id, source

    def _add(self, d: Delivered, pieces: Sequence[Piece]) -> None:
        key = self._source_key(d)
        fold = add_material(key[2], self._open[key], pieces, seq=d.seq,
                            stored_at=d.stored_at, limits=self.limits)
        self._open[key] = fold.open
        self._closed.extend((key[0], key[1], w) for w in fold.closed)

    async def on_material(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for d in run:
            self._add(d, _pieces(d))

    async def on_turns(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for d in run:
            pieces = _pieces(d)
            self._add(d, pieces)
            turn: TurnRecorded = d.event.payload
            session = (d.event.tenant_id, d.event.user_id, turn.session_id)
            if pieces and is_complex_turn(turn) and \
                    self._reflections[session] < self.max_reflections:
                self._reflections[session] += 1
                self._closed.append((d.event.tenant_id, d.event.user_id, reflection(
                    source_of(turn).key, pieces, seq=d.seq, stored_at=d.stored_at)))

    async def on_ticks(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for d in run:
            key = self._source_key(d)
            fold = tick(key[2], self._open[key], d.event.payload.window_opened_seq,
                        seq=d.seq, stored_at=d.stored_at)
            self._open[key] = fold.open
            self._closed.extend((key[0], key[1], w) for w in fold.closed)

    async def before_commit(self, cur: AsyncCursor[Any], batch: Sequence[Delivered]) -> None:
        await store.save_open(cur, {k: w for k, w in self._open.items()
                                    if w is not self._loaded.get(k)}, self._texts)
        await store.insert_closed(cur, self._closed, self._texts)
        await store.save_reflections(
            cur, {k: n for k, n in self._reflections.items() if n > 0})
        self._open, self._loaded, self._closed, self._reflections = {}, {}, [], {}
        self._texts = ColumnMemo(COLUMNS)

    handlers = {
        TurnRecorded: on_turns,
        EmailObserved: on_material,
        DocumentIngested: on_material,
        ExtractionWindowDue: on_ticks,
    }


class RequestsProjection(Projection):
    name = "extractor.requests"
    schema = store.SCHEMA
    tables = (store.REQUESTS,)

    async def on_requests(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for d in run:
            p: ReextractionRequested = d.event.payload
            await store.insert_request(cur, d.event.tenant_id, d.event.user_id, d.seq,
                                       p.since, p.prompt_version, p.source)

    handlers = {ReextractionRequested: on_requests}
