"""Every statement on the `extractor` schema.

The projections' tables (open windows, closed windows, reflection counts, re-extraction
requests) are folds of the streams; the LLM's stored answers, the quarantine and the rolling
summaries are the worker's and outlive a replay, which is what lets a replay reuse an answer
instead of paying for it again.

What the user's material says is kept sealed with the user's column key
(habitus.crypto.columns), so an erasure leaves no readable copy in the heap, the WAL or a
backup: each chunk's `text` in a window's `chunks` (the rest of a chunk, its kind, evidence ids
and times, stays plain, so the column is still a JSON array and appending to an open window is
still the fold's business alone), the model's raw answer and its stored result, a refusal's
detail (it quotes the material) and raw facet, and the rolling summaries. Every statement here
seals what it writes and opens what it reads, so the rest of the service sees plain text. Sources,
prompt versions, states and refusal reasons are identifiers and labels, not what anyone said,
and stay plain: the worker's lanes, the re-extraction requests and the counts select on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from habitus.crypto.columns import COLUMNS, ColumnMemo, is_sealed
from habitus.crypto.keyring import Shredded
from habitus.ids import TENANT_WIDE
from services.extractor.windowing import ClosedWindow, Kept, OpenWindow, Piece

SCHEMA = "extractor"
OPEN_WINDOWS = f"{SCHEMA}.open_windows"
WINDOWS = f"{SCHEMA}.windows"
REFLECTION_COUNTS = f"{SCHEMA}.reflection_counts"
REQUESTS = f"{SCHEMA}.reextract_requests"
EXTRACTIONS = f"{SCHEMA}.extractions"
QUARANTINE = f"{SCHEMA}.quarantine"
SOURCES = f"{SCHEMA}.sources"

SourceKey = tuple[str, str, str]  # tenant, user, source


def _stored(tenant_id: str, user_id: str, pieces: Sequence[Piece], texts: ColumnMemo,
            kept: Kept | None = None) -> list[Mapping[str, Any]]:
    """A window's chunks as its `chunks` column keeps them, each text sealed for the user
    (through the batch's memo): what it kept from its row as it was (a text from before
    sealing is sealed now), then the pieces added since."""
    sealed = texts.seal_all(tenant_id, user_id, [p.draft.text for p in pieces])
    before = [item if is_sealed(item["text"]) else
              {**item, "text": texts.seal(tenant_id, user_id,
                                          texts.open(tenant_id, user_id, item["text"]))}
              for item in (kept.items if kept else ())]
    return [*before, *({**p.as_dict(), "text": text}
                       for p, text in zip(pieces, sealed, strict=True))]


def _chunks_json(items: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(items), ensure_ascii=False)


def _pieces(tenant_id: str, user_id: str, doc: Any) -> tuple[Piece, ...]:
    """The pieces a `chunks` column holds, their texts opened (a text stored before sealing
    opens as itself). Raises `Shredded` once the user's keys are destroyed."""
    items = json.loads(doc) if isinstance(doc, str) else doc
    return tuple(Piece.from_dict({**item, "text": COLUMNS.open(tenant_id, user_id,
                                                               item["text"])})
                 for item in items)


# --------------------------------------------------------------------------- the windows fold


async def load_open(cur: AsyncCursor[Any], keys: Iterable[SourceKey]
                    ) -> dict[SourceKey, OpenWindow]:
    """The open windows of the sources a batch touches (one read for all of its users), their
    pieces kept as their rows hold them, unopened (`Kept`): they are written back, grown or
    closed, as they are."""
    keys = list(keys)
    if not keys:
        return {}
    tenants, users, sources = (list(col) for col in zip(*keys, strict=True))
    await cur.execute(
        f"""SELECT tenant_id, user_id, source, opened_seq, opened_at, tokens, chunks
            FROM {OPEN_WINDOWS}
            WHERE (tenant_id, user_id, source) IN (
                SELECT * FROM unnest(%b::text[], %b::text[], %b::text[]))""",
        (tenants, users, sources))
    return {(t, u, s): OpenWindow(seq, at, (), Kept(tuple(
                json.loads(chunks) if isinstance(chunks, str) else chunks), int(tokens)))
            for t, u, s, seq, at, tokens, chunks in await cur.fetchall()}


async def save_open(cur: AsyncCursor[Any], windows: dict[SourceKey, OpenWindow | None],
                    texts: ColumnMemo) -> None:
    gone = [k for k, w in windows.items() if w is None]
    kept = [(k, w) for k, w in windows.items() if w is not None]
    if gone:
        await cur.executemany(
            f"DELETE FROM {OPEN_WINDOWS} WHERE tenant_id = %s AND user_id = %s AND source = %s",
            gone)
    if kept:
        await cur.executemany(
            f"""INSERT INTO {OPEN_WINDOWS}
                    (tenant_id, user_id, source, opened_seq, opened_at, tokens, chunks)
                VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)
                ON CONFLICT (tenant_id, user_id, source) DO UPDATE SET
                    opened_seq = EXCLUDED.opened_seq, opened_at = EXCLUDED.opened_at,
                    tokens = EXCLUDED.tokens, chunks = EXCLUDED.chunks""",
            [(*k, w.opened_seq, w.opened_at, w.tokens,
              _chunks_json(_stored(k[0], k[1], w.pieces, texts, w.kept))) for k, w in kept])


async def insert_closed(cur: AsyncCursor[Any],
                        closed: Sequence[tuple[str, str, ClosedWindow]], texts: ColumnMemo
                        ) -> None:
    """Store closed windows, each with the id of its chunks as stored (sealed): nothing is
    opened, what a window kept from its row included."""
    if not closed:
        return
    rows = []
    for t, u, w in closed:
        items = _stored(t, u, w.pieces, texts, w.kept)
        rows.append((t, u, w.window_id([item["text"] for item in items]), w.source, w.kind,
                     w.opened_seq, w.closed_seq, w.closed_at, w.closed_by, w.tokens,
                     _chunks_json(items)))
    await cur.executemany(
        f"""INSERT INTO {WINDOWS} (tenant_id, user_id, window_id, source, kind, opened_seq,
                                   closed_seq, closed_at, closed_by, tokens, chunks)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)
            ON CONFLICT (tenant_id, user_id, window_id) DO NOTHING""", rows)


async def load_reflections(cur: AsyncCursor[Any], keys: Iterable[tuple[str, str, str]]
                           ) -> dict[tuple[str, str, str], int]:
    keys = list(keys)
    if not keys:
        return {}
    tenants, users, sessions = (list(col) for col in zip(*keys, strict=True))
    await cur.execute(
        f"""SELECT tenant_id, user_id, session_id, reflections FROM {REFLECTION_COUNTS}
            WHERE (tenant_id, user_id, session_id) IN (
                SELECT * FROM unnest(%b::text[], %b::text[], %b::text[]))""",
        (tenants, users, sessions))
    return {(t, u, s): n for t, u, s, n in await cur.fetchall()}


async def save_reflections(cur: AsyncCursor[Any], counts: dict[tuple[str, str, str], int]
                           ) -> None:
    if counts:
        await cur.executemany(
            f"""INSERT INTO {REFLECTION_COUNTS} (tenant_id, user_id, session_id, reflections)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (tenant_id, user_id, session_id)
                DO UPDATE SET reflections = EXCLUDED.reflections""",
            [(*k, n) for k, n in counts.items()])


async def insert_request(cur: AsyncCursor[Any], tenant_id: str, user_id: str, seq: int,
                         since: float, prompt_version: str, source: str | None) -> None:
    await cur.execute(
        f"""INSERT INTO {REQUESTS} (tenant_id, user_id, seq, since, prompt_version, source)
            VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        (tenant_id, user_id, seq, since, prompt_version, source))


# --------------------------------------------------------------------------- the worker


@dataclass(frozen=True)
class WindowRow:
    tenant_id: str
    user_id: str
    window_id: str
    source: str
    kind: str
    closed_seq: int
    closed_at: float
    pieces: tuple[Piece, ...]
    state: str
    attempts: int
    next_attempt_at: float


_WINDOW_COLUMNS = ("tenant_id, user_id, window_id, source, kind, closed_seq, closed_at, "
                   "chunks, state, attempts, next_attempt_at")


def _window(row: Sequence[Any]) -> WindowRow:
    t, u, w, s, k, seq, at, chunks, state, attempts, nxt = row
    return WindowRow(t, u, w, s, k, seq, at, _pieces(t, u, chunks), state, attempts, nxt)


async def due_ticks(cur: AsyncCursor[Any], opened_before: float, limit: int = 500
                    ) -> list[tuple[str, str, str, int]]:
    """Open windows that waited long enough: (tenant, user, source, opened_seq)."""
    await cur.execute(
        f"""SELECT tenant_id, user_id, source, opened_seq FROM {OPEN_WINDOWS}
            WHERE opened_at <= %s ORDER BY opened_at LIMIT %s""", (opened_before, limit))
    return [(t, u, s, int(q)) for t, u, s, q in await cur.fetchall()]


async def next_windows(cur: AsyncCursor[Any], now: float, limit: int) -> list[WindowRow]:
    """The first unfinished window of each lane (a user's source and kind), when it is due:
    a lane's windows go in order, so the rolling summary each one is given is the one its
    predecessor left."""
    await cur.execute(
        f"""SELECT {_WINDOW_COLUMNS} FROM (
                SELECT DISTINCT ON (tenant_id, user_id, source, kind) {_WINDOW_COLUMNS}
                FROM {WINDOWS} WHERE state <> 'done'
                ORDER BY tenant_id, user_id, source, kind, closed_seq) AS heads
            WHERE next_attempt_at <= %s ORDER BY closed_seq LIMIT %s""", (now, limit))
    heads: list[WindowRow] = []
    for row in await cur.fetchall():
        try:
            heads.append(_window(row))
        except Shredded:
            continue  # a user erased meanwhile: their erasure removes the window
    return heads


async def wanted_version(cur: AsyncCursor[Any], w: WindowRow) -> str | None:
    """The prompt version an operator asked this window to be extracted with (the newest
    request covering it), or None: any stored answer will do."""
    await cur.execute(
        f"""SELECT prompt_version FROM {REQUESTS}
            WHERE tenant_id = %s AND user_id IN (%s, %s) AND since <= %s
              AND (source IS NULL OR source = %s)
            ORDER BY seq DESC LIMIT 1""",
        (w.tenant_id, w.user_id, TENANT_WIDE, w.closed_at, w.source))
    row = await cur.fetchone()
    return None if row is None else str(row[0])


@dataclass(frozen=True)
class Stored:
    prompt_version: str
    model: str
    result: dict[str, Any]


async def stored_answer(cur: AsyncCursor[Any], w: WindowRow, version: str | None
                        ) -> Stored | None:
    await cur.execute(
        f"""SELECT prompt_version, model, result FROM {EXTRACTIONS}
            WHERE tenant_id = %s AND user_id = %s AND window_id = %s
              AND (%s::text IS NULL OR prompt_version = %s)
            ORDER BY created_at DESC LIMIT 1""",
        (w.tenant_id, w.user_id, w.window_id, version, version))
    row = await cur.fetchone()
    if row is None:
        return None
    return Stored(row[0], row[1], COLUMNS.open_json(w.tenant_id, w.user_id, row[2]))


async def window_exists(cur: AsyncCursor[Any], w: WindowRow) -> bool:
    """Locks the window's row: an erasure running now waits, or has already removed it."""
    await cur.execute(
        f"""SELECT 1 FROM {WINDOWS} WHERE tenant_id = %s AND user_id = %s AND window_id = %s
            FOR UPDATE""", (w.tenant_id, w.user_id, w.window_id))
    return await cur.fetchone() is not None


async def store_answer(cur: AsyncCursor[Any], w: WindowRow, stored: Stored, raw_output: str,
                       tokens_in: int, tokens_out: int, now: float,
                       quarantined: Sequence[tuple[int, str, str, Any]]) -> None:
    """The model's answer (raw and as validated) and its refusals, sealed for the user: the
    answer quotes the material, and a refusal's detail and raw facet quote the answer."""
    t, u = w.tenant_id, w.user_id
    await cur.execute(
        f"""INSERT INTO {EXTRACTIONS} (tenant_id, user_id, window_id, prompt_version, model,
                                       raw_output, result, tokens_in, tokens_out, created_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        (t, u, w.window_id, stored.prompt_version, stored.model,
         COLUMNS.seal(t, u, raw_output), Jsonb(COLUMNS.seal_json(t, u, stored.result)),
         tokens_in, tokens_out, now))
    if quarantined:
        await cur.executemany(
            f"""INSERT INTO {QUARANTINE} (tenant_id, user_id, window_id, prompt_version, idx,
                                          source, reason, detail, raw, created_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            [(t, u, w.window_id, stored.prompt_version, idx, w.source, reason,
              COLUMNS.seal(t, u, detail), Jsonb(COLUMNS.seal_json(t, u, raw)), now)
             for idx, reason, detail, raw in quarantined])


async def mark_waiting(cur: AsyncCursor[Any], w: WindowRow, next_attempt_at: float,
                       error: str, *, count_attempt: bool = True) -> None:
    await cur.execute(
        f"""UPDATE {WINDOWS} SET state = 'waiting', next_attempt_at = %s, last_error = %s,
                   attempts = attempts + %s
            WHERE tenant_id = %s AND user_id = %s AND window_id = %s""",
        (next_attempt_at, error, 1 if count_attempt else 0, w.tenant_id, w.user_id,
         w.window_id))


async def mark_done(cur: AsyncCursor[Any], w: WindowRow, summary: str | None, now: float
                    ) -> None:
    await cur.execute(
        f"""UPDATE {WINDOWS} SET state = 'done', last_error = NULL
            WHERE tenant_id = %s AND user_id = %s AND window_id = %s""",
        (w.tenant_id, w.user_id, w.window_id))
    if summary:  # an empty summary says nothing new: the rolling one stays
        await cur.execute(
            f"""INSERT INTO {SOURCES} (tenant_id, user_id, source, summary, window_id,
                                       updated_at)
                VALUES (%s, %s, %s, %s, %s, %s)
                ON CONFLICT (tenant_id, user_id, source) DO UPDATE SET
                    summary = EXCLUDED.summary, window_id = EXCLUDED.window_id,
                    updated_at = EXCLUDED.updated_at""",
            (w.tenant_id, w.user_id, w.source, COLUMNS.seal(w.tenant_id, w.user_id, summary),
             w.window_id, now))


async def rolling_summary(cur: AsyncCursor[Any], w: WindowRow) -> str | None:
    await cur.execute(
        f"SELECT summary FROM {SOURCES} WHERE tenant_id = %s AND user_id = %s AND source = %s",
        (w.tenant_id, w.user_id, w.source))
    row = await cur.fetchone()
    return None if row is None else COLUMNS.open(w.tenant_id, w.user_id, str(row[0]))


async def unhandled_requests(cur: AsyncCursor[Any]
                             ) -> list[tuple[str, str, int, float, str, str | None]]:
    await cur.execute(
        f"""SELECT tenant_id, user_id, seq, since, prompt_version, source FROM {REQUESTS}
            WHERE NOT handled ORDER BY seq""")
    return [(t, u, int(q), float(since), str(v), src)
            for t, u, q, since, v, src in await cur.fetchall()]


def _covered(alias: str = "w") -> str:
    return f"""{alias}.tenant_id = %(tenant)s
        AND (%(user)s = %(everyone)s OR {alias}.user_id = %(user)s)
        AND {alias}.kind = 'extract' AND {alias}.closed_at >= %(since)s
        AND (%(source)s::text IS NULL OR {alias}.source = %(source)s)
        AND NOT EXISTS (SELECT 1 FROM {EXTRACTIONS} e
            WHERE e.tenant_id = {alias}.tenant_id AND e.user_id = {alias}.user_id
              AND e.window_id = {alias}.window_id AND e.prompt_version = %(version)s)"""


def _request_params(tenant_id: str, user_id: str, since: float, version: str,
                    source: str | None) -> dict[str, Any]:
    return {"tenant": tenant_id, "user": user_id, "everyone": TENANT_WIDE, "since": since,
            "version": version, "source": source}


async def count_reextractable(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                              since: float, version: str, source: str | None) -> int:
    await cur.execute(f"SELECT count(*) FROM {WINDOWS} w WHERE {_covered()}",
                      _request_params(tenant_id, user_id, since, version, source))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def requeue(cur: AsyncCursor[Any], tenant_id: str, user_id: str, seq: int, since: float,
                  version: str, source: str | None) -> int:
    """Put the windows a request covers back in line, once; the request is then handled."""
    await cur.execute(
        f"""UPDATE {WINDOWS} w SET state = 'ready', attempts = 0, next_attempt_at = 0,
                   last_error = NULL WHERE {_covered()}""",
        _request_params(tenant_id, user_id, since, version, source))
    moved = cur.rowcount
    await cur.execute(
        f"UPDATE {REQUESTS} SET handled = true WHERE tenant_id = %s AND user_id = %s AND seq = %s",
        (tenant_id, user_id, seq))
    return moved


# --------------------------------------------------------------------------- reads


async def window_counts(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                        ) -> dict[str, int]:
    await cur.execute(
        f"""SELECT state, count(*) FROM {WINDOWS} WHERE tenant_id = %s AND user_id = %s
            GROUP BY state""", (tenant_id, user_id))
    counts = {"open": 0, "ready": 0, "waiting": 0, "done": 0}
    counts.update({state: int(n) for state, n in await cur.fetchall()})
    await cur.execute(
        f"SELECT count(*) FROM {OPEN_WINDOWS} WHERE tenant_id = %s AND user_id = %s",
        (tenant_id, user_id))
    row = await cur.fetchone()
    counts["open"] = int(row[0]) if row else 0
    return counts


async def last_error(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> str | None:
    await cur.execute(
        f"""SELECT last_error FROM {WINDOWS} WHERE tenant_id = %s AND user_id = %s
              AND state = 'waiting' ORDER BY closed_seq LIMIT 1""", (tenant_id, user_id))
    row = await cur.fetchone()
    return None if row is None else row[0]


async def sources(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                  ) -> list[tuple[str, str, int, float]]:
    await cur.execute(
        f"""SELECT s.source, s.summary,
                   (SELECT count(*) FROM {WINDOWS} w WHERE w.tenant_id = s.tenant_id
                      AND w.user_id = s.user_id AND w.source = s.source
                      AND w.kind = 'extract' AND w.state = 'done'),
                   s.updated_at
            FROM {SOURCES} s WHERE s.tenant_id = %s AND s.user_id = %s ORDER BY s.source""",
        (tenant_id, user_id))
    return [(s, COLUMNS.open(tenant_id, user_id, summary), int(n), float(at))
            for s, summary, n, at in await cur.fetchall()]


async def quarantine_counts(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                            ) -> dict[str, int]:
    await cur.execute(
        f"""SELECT reason, count(*) FROM {QUARANTINE} WHERE tenant_id = %s AND user_id = %s
            GROUP BY reason ORDER BY reason""", (tenant_id, user_id))
    return {reason: int(n) for reason, n in await cur.fetchall()}


async def quarantined(cur: AsyncCursor[Any], tenant_id: str, user_id: str, limit: int
                      ) -> list[tuple[Any, ...]]:
    await cur.execute(
        f"""SELECT window_id, source, prompt_version, idx, reason, detail, raw, created_at
            FROM {QUARANTINE} WHERE tenant_id = %s AND user_id = %s
            ORDER BY created_at DESC, window_id, idx LIMIT %s""", (tenant_id, user_id, limit))
    return [(w, s, v, idx, reason, COLUMNS.open(tenant_id, user_id, detail),
             COLUMNS.open_json(tenant_id, user_id, raw), at)
            for w, s, v, idx, reason, detail, raw, at in await cur.fetchall()]
