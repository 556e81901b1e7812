"""The `learning` schema: SQL only, no decisions (those are in scoring.py).

All writes go through the cursor of the projection's batch transaction, so evidence, commands,
facets and the checkpoint commit together.

Long on purpose: every statement on the five tables is here, so a change of a column or an
index is made and reviewed in one place. The reads a rebuild makes come in a form for many
users at once (a run of rebuild requests reads them in six statements), with the one-user form
beside each as its special case; its writes are gathered by `RebuildWrites` and made for the
whole run in at most eight.

Every key, value and sentence is sealed with its user's key on the way in and opened on the way
out (`sealing`): callers hand in and get back text; only the rows hold ciphertext.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from psycopg import AsyncCursor
from psycopg.errors import UniqueViolation
from pydantic_core import to_json

from habitus.crypto import Shredded
from services.stability_detector.scoring import Command, Evidence, FacetKey, FacetRow, UserStats
from services.stability_detector.sealing import Texts, UserText
from services.stability_detector.summary import ValueStats, dumps, dumps_refs, parse_refs

SCHEMA = "learning"
EVIDENCE = f"{SCHEMA}.evidence"
COMMANDS = f"{SCHEMA}.commands"
FACETS = f"{SCHEMA}.facets"
USERS = f"{SCHEMA}.users"
VALUE_STATS = f"{SCHEMA}.value_stats"
TABLES = (EVIDENCE, COMMANDS, FACETS, USERS, VALUE_STATS)


class EvidenceRow(NamedTuple):
    """One evidence row in COPY column order (plus when its event occurred), as text: its
    key, value and sentence are sealed when it is written."""

    tenant_id: str
    user_id: str
    event_id: str
    seq: int
    facet_class: str
    key: str
    value: str
    cue: str
    observed_at: float
    confidence: float
    producer: str
    #: the evidence refs as JSON text, serialised once (COPY writes it as is)
    refs_json: str
    occurred_at: float
    stance: str | None = None
    sentence: str | None = None




_EVIDENCE_COLUMNS = ("tenant_id, user_id, event_id, seq, class, key, value, cue_family, "
                     "observed_at, confidence, producer, refs, stance, sentence")


async def _copy_rows(cur: AsyncCursor[Any], table: str, rows: Sequence[EvidenceRow]) -> None:
    async with cur.copy(f"COPY {table} ({_EVIDENCE_COLUMNS}) FROM STDIN") as copy:
        for r in rows:
            await copy.write_row((*r[:12], r.stance, r.sentence))


def _sealed_row(row: EvidenceRow, texts: Texts) -> EvidenceRow:
    text = texts[(row.tenant_id, row.user_id)]
    return row._replace(key=text.seal(row.key), value=text.seal(row.value),
                        sentence=text.seal_opt(row.sentence))


async def insert_evidence(cur: AsyncCursor[Any], rows: Sequence[EvidenceRow]) -> None:
    """COPY straight into the evidence table. A candidate seen before (re-published past the
    stream's duplicate window) makes the COPY fail on the primary key; only then the batch goes
    through a staging table and is moved skipping the ids already there. COPY's speed in the
    common case, INSERT's idempotence always. Key, value and sentence are sealed, each distinct
    one of a user once per batch."""
    texts = Texts()
    rows = [_sealed_row(r, texts) for r in rows]
    try:
        async with cur.connection.transaction():  # a savepoint: the fallback starts clean
            await _copy_rows(cur, EVIDENCE, rows)
    except UniqueViolation:
        await cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS evidence_in (LIKE {EVIDENCE}) "
                          "ON COMMIT DELETE ROWS")
        await _copy_rows(cur, "evidence_in", rows)
        await cur.execute(
            f"""WITH moved AS (DELETE FROM evidence_in RETURNING {_EVIDENCE_COLUMNS})
                INSERT INTO {EVIDENCE} ({_EVIDENCE_COLUMNS})
                SELECT {_EVIDENCE_COLUMNS} FROM moved
                ON CONFLICT (tenant_id, user_id, event_id) DO NOTHING""")
    latest: dict[tuple[str, str], tuple[float, int, float]] = {}
    lowest: dict[tuple[str, str], int] = {}
    for r in rows:
        lowest[(r.tenant_id, r.user_id)] = min(lowest.get((r.tenant_id, r.user_id), r.seq),
                                               r.seq)
        user = (r.tenant_id, r.user_id)
        # the later of when it arrived and when it says it happened: a rebuild counts only
        # evidence observed by its as_of, so evidence stamped a few seconds ahead (an agent's
        # clock, a turn reported with its own times) must keep the user dirty until a rebuild
        # at or after that time, or it would wait for the next periodic one
        when = max(r.occurred_at, r.observed_at)
        at, seq, first = latest.get(user, (when, r.seq, when))
        latest[user] = (max(at, when), max(seq, r.seq), min(first, when))
    users = sorted(latest.items())
    await cur.execute(  # one statement for the whole batch's users (arrays, not N rows)
        f"""WITH x AS (
              SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::int8[],
                                   %b::float8[], %b::int8[]) AS x(t, u, at, seq, first, low))
            INSERT INTO {USERS} (tenant_id, user_id, dirty, last_candidate_at,
                last_candidate_seq, pending_since)
            SELECT t, u, true, at, seq, first FROM x
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET dirty = true,
              last_candidate_at = GREATEST({USERS}.last_candidate_at, EXCLUDED.last_candidate_at),
              last_candidate_seq = EXCLUDED.last_candidate_seq,
              -- the oldest evidence still waiting for a rebuild (LEAST skips a NULL)
              pending_since = CASE WHEN {USERS}.dirty
                THEN LEAST({USERS}.pending_since, EXCLUDED.pending_since)
                ELSE EXCLUDED.pending_since END,
              -- evidence from before where the user's summaries have come (applied out of
              -- log order, e.g. replayed from dead letters): summarised again from the log
              folded_seq = CASE WHEN (SELECT low FROM x WHERE x.t = EXCLUDED.tenant_id
                                        AND x.u = EXCLUDED.user_id) <= {USERS}.folded_seq
                THEN NULL ELSE {USERS}.folded_seq END
        """,
        ([t for (t, _), _ in users], [u for (_, u), _ in users],
         [at for _, (at, _, _) in users], [seq for _, (_, seq, _) in users],
         [first for _, (_, _, first) in users], [lowest[user] for user, _ in users]),
    )


async def insert_command(cur: AsyncCursor[Any], tenant_id: str, user_id: str, event_id: str,
                         command: Command) -> bool:
    text = UserText(tenant_id, user_id)
    await cur.execute(
        f"""INSERT INTO {COMMANDS} (tenant_id, user_id, event_id, seq, kind, class, key, value,
                at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, event_id) DO NOTHING""",
        (tenant_id, user_id, event_id, command.seq, command.kind, command.facet_class,
         text.seal_opt(command.key), text.seal_opt(command.value), command.at),
    )
    return cur.rowcount == 1


_EVIDENCE_READ = ("event_id, class, key, value, cue_family, observed_at, confidence, seq, refs, "
                  "stance, sentence")
_EVIDENCE_READ_E = ", ".join(f"e.{c.strip()}" for c in _EVIDENCE_READ.split(","))


async def load_evidence(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                        facet: FacetKey | None = None) -> list[Evidence]:
    """The user's evidence (of one facet), in log order, opened."""
    text = UserText(tenant_id, user_id)
    query = f"SELECT {_EVIDENCE_READ} FROM {EVIDENCE} WHERE tenant_id = %s AND user_id = %s"
    params: tuple[Any, ...] = (tenant_id, user_id)
    if facet is not None:
        query += " AND class = %s AND key = ANY(%b::text[])"
        params += (facet[0], text.forms(facet[1]))
    await cur.execute(query + " ORDER BY seq", params)
    return [_evidence(r, text) for r in await cur.fetchall()]


def _evidence(r: Sequence[Any], text: UserText) -> Evidence:
    return Evidence(r[0], r[1], text.open(r[2]), text.open(r[3]), r[4], float(r[5]),
                    float(r[6]), int(r[7]), tuple(r[8] or ()), r[9], text.open_opt(r[10]))


async def load_evidence_since(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                              after_seq: int, also: Sequence[int]) -> list[Evidence]:
    """The user's evidence logged after `after_seq`, and that at the positions `also` (the
    evidence that waited for its time): what a rebuild folds in, from the (user, seq) index
    (`_evidence_since_rows` for one user)."""
    user = (tenant_id, user_id)
    rows = await _evidence_since_rows(cur, {user: SummaryState(None, after_seq, tuple(also),
                                                               None)})
    text = UserText(tenant_id, user_id)
    return [_evidence(r, text) for r in rows[user]]


async def _refs_of_values(cur: AsyncCursor[Any], values: Sequence[tuple[str, str, str, str, str]]
                          ) -> dict[UserKey, list[tuple[str, str, str, Any]]]:
    """The stored refs of these (tenant, user, class, key, value)s, as stored (sealed key and
    value, refs unparsed), by user, in one statement: the refs of the values a fold is about
    to count evidence for, which it would otherwise read user by user (`load_refs`)."""
    found: dict[UserKey, list[tuple[str, str, str, Any]]] = {}
    distinct = list(dict.fromkeys(values))
    if not distinct:
        return found
    await cur.execute(
        f"""SELECT v.tenant_id, v.user_id, v.class, v.key, v.value, v.refs
            FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[])
              AS w(t, u, c, k, val)
            JOIN {VALUE_STATS} AS v ON v.tenant_id = w.t AND v.user_id = w.u
              AND v.class = w.c AND v.key = w.k AND v.value = w.val""",
        _columns(distinct, 5))
    for r in await cur.fetchall():
        found.setdefault((r[0], r[1]), []).append((r[2], r[3], r[4], r[5]))
    return found


async def _evidence_since_rows(cur: AsyncCursor[Any], states: Mapping[UserKey, SummaryState]
                               ) -> dict[UserKey, list[tuple[Any, ...]]]:
    """`load_evidence_since` for many users in one statement, as stored (unopened): each
    user's rows after their `folded_seq` and at their deferred positions, in log order."""
    found: dict[UserKey, list[tuple[Any, ...]]] = {user: [] for user in states}
    if not states:
        return found
    users = list(states.items())
    # a deferred position is at or before the user's folded_seq, never after it, so the two
    # halves never meet (the condition says so, for a row that says otherwise)
    deferred = [(t, u, seq, state.folded_seq) for (t, u), state in users
                for seq in state.deferred]
    await cur.execute(
        f"""SELECT e.tenant_id, e.user_id, {_EVIDENCE_READ_E} FROM
              unnest(%b::text[], %b::text[], %b::int8[]) AS w(t, u, after)
              JOIN {EVIDENCE} AS e ON e.tenant_id = w.t AND e.user_id = w.u AND e.seq > w.after
            UNION ALL
            SELECT e.tenant_id, e.user_id, {_EVIDENCE_READ_E} FROM
              unnest(%b::text[], %b::text[], %b::int8[], %b::int8[]) AS d(t, u, s, after)
              JOIN {EVIDENCE} AS e ON e.tenant_id = d.t AND e.user_id = d.u AND e.seq = d.s
                AND d.s <= d.after
            ORDER BY tenant_id, user_id, seq""",
        ([t for (t, _), _ in users], [u for (_, u), _ in users],
         [state.folded_seq for _, state in users], *_columns(deferred, 4)))
    for r in await cur.fetchall():
        found[(r[0], r[1])].append(r[2:])
    return found


class SummaryState(NamedTuple):
    """Where a user's cache and summaries stand (all None/empty for a user never rebuilt)."""

    last_as_of: float | None
    #: the log position the summaries hold everything up to; None: summarise from the log
    folded_seq: int | None
    #: evidence logged by `folded_seq` but stamped after `last_as_of`: folded when its time comes
    deferred: tuple[int, ...]
    #: the evidence window the summaries were folded for (a reset moves it)
    window: float | None


UserKey = tuple[str, str]
_NEVER_REBUILT = SummaryState(None, None, (), None)


async def _rows_of(cur: AsyncCursor[Any], table: str, columns: str, users: Sequence[UserKey],
                   order_by: str = "") -> list[tuple[Any, ...]]:
    """(tenant_id, user_id, *columns) of `table`'s rows of these users, in one statement: the
    users travel as two arrays joined to the table, an index lookup per user, never a scan."""
    if not users:
        return []
    users = list(dict.fromkeys(users))  # a user named twice would read its rows twice
    await cur.execute(
        f"SELECT x.tenant_id, x.user_id, {columns} FROM unnest(%b::text[], %b::text[]) "
        f"AS w(t, u) JOIN {table} AS x ON x.tenant_id = w.t AND x.user_id = w.u {order_by}",
        ([t for t, _ in users], [u for _, u in users]))
    return await cur.fetchall()


async def _rows_by_user(cur: AsyncCursor[Any], table: str, columns: str,
                        users: Sequence[UserKey], order_by: str = ""
                        ) -> dict[UserKey, list[tuple[Any, ...]]]:
    """`_rows_of`, each user's rows apart (without the user), every user named present."""
    found: dict[UserKey, list[tuple[Any, ...]]] = {user: [] for user in users}
    for r in await _rows_of(cur, table, columns, users, order_by):
        found[(r[0], r[1])].append(r[2:])
    return found


async def summary_states(cur: AsyncCursor[Any], users: Sequence[UserKey]
                         ) -> dict[UserKey, SummaryState]:
    """Where each user's summaries stand, every user in one statement (a user never rebuilt:
    all None)."""
    found = dict.fromkeys(users, _NEVER_REBUILT)
    for r in await _rows_of(cur, USERS, "last_as_of, folded_seq, deferred_seqs, "
                            "summary_window", users):
        found[(r[0], r[1])] = SummaryState(r[2], None if r[3] is None else int(r[3]),
                                           tuple(int(x) for x in r[4] or ()), r[5])
    return found


async def summary_state(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> SummaryState:
    return (await summary_states(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


_STATS_READ = "class, key, value, stats"


def _stats_from(rows: Sequence[Sequence[Any]], text: UserText) -> UserStats:
    found: UserStats = {}
    for r in rows:
        found.setdefault((r[0], text.open(r[1])), {})[text.open(r[2])] = ValueStats.from_json(
            r[3], refs=None)
    return found


async def load_stats_of(cur: AsyncCursor[Any], users: Sequence[UserKey]
                        ) -> dict[UserKey, UserStats]:
    """Each user's summaries, without their refs (`load_refs` reads those of the values that
    need them: the refs are most of a summary's size), every user in one statement."""
    rows = await _rows_by_user(cur, VALUE_STATS, _STATS_READ, users)
    return {user: _stats_from(found, UserText(*user)) for user, found in rows.items()}


async def load_stats(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> UserStats:
    return (await load_stats_of(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


async def load_refs(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                    values: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str],
                                                                    list[Any]]:
    """The stored refs of these (class, key, value)s, as stored (one statement)."""
    if not values:
        return {}
    text = UserText(tenant_id, user_id)
    asked = {(c, text.seal(k), text.seal(v)): (c, k, v) for c, k, v in values}
    await cur.execute(
        f"""SELECT v.class, v.key, v.value, v.refs FROM {VALUE_STATS} AS v
            JOIN unnest(%b::text[], %b::text[], %b::text[]) AS w(c, k, val)
              ON v.class = w.c AND v.key = w.k AND v.value = w.val
            WHERE v.tenant_id = %s AND v.user_id = %s""",
        ([c for c, _, _ in asked], [k for _, k, _ in asked], [v for _, _, v in asked],
         tenant_id, user_id))
    return {asked[(r[0], r[1], r[2])]: r[3] for r in await cur.fetchall()}


class RebuildWrites:
    """What rebuilds write, gathered and made at `flush` in one statement per table and kind,
    whatever the number of users: a run of rebuild requests cost four or five round trips per
    user when each wrote its own rows (under load, most of the learning cache's statements).

    A user's writes are independent of every other user's, and one rebuild's own reads never
    meet its writes (a summary it rewrites has its refs loaded already; facets and the users
    row are read before it starts), so a run's writes may wait for its end. A user rebuilt a
    second time must read the first's writes: `pending(user)` tells the caller to flush first,
    and one flush never holds two rebuilds of one user (an upsert may not touch a row twice).
    The order within a flush is the order of one rebuild: summaries (deleted, then upserted),
    held values, facets (deleted, then upserted), the users row."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._users: set[UserKey] = set()
        self._stats_cleared: list[UserKey] = []
        self._stats_gone: list[tuple[str, str, str, str, str]] = []
        self._stats_changed: list[tuple[str, str, str, str, str, str, str]] = []
        self._held: list[tuple[str, str, int, str | None]] = []
        self._facets_cleared: list[UserKey] = []
        self._facets_gone: list[tuple[str, str, str, str]] = []
        self._facet_rows: list[tuple[str, str, float, FacetRow, UserText]] = []
        self._user_rows: list[tuple[str, str, float, float | None, SummaryState]] = []

    def pending(self, user: UserKey) -> bool:
        """Whether this user's writes wait here (flush before rebuilding them again)."""
        return user in self._users

    def stats(self, tenant_id: str, user_id: str,
              changed: Sequence[tuple[str, str, str, ValueStats]],
              gone: Sequence[tuple[str, str, str]], *, replace_all: bool = False) -> None:
        """The summaries a rebuild changed (their refs must be loaded), and those gone
        (`replace_all`: the user's summaries were made again from the log, every old row goes
        first)."""
        text = UserText(tenant_id, user_id)
        self._users.add((tenant_id, user_id))
        if replace_all:
            self._stats_cleared.append((tenant_id, user_id))
        else:
            self._stats_gone.extend((tenant_id, user_id, c, text.seal(k), text.seal(v))
                                    for c, k, v in gone)
        self._stats_changed.extend(
            (tenant_id, user_id, c, text.seal(k), text.seal(v), dumps(s), dumps_refs(s))
            for c, k, v, s in changed)

    def held(self, tenant_id: str, user_id: str, held: Mapping[int, str | None]) -> None:
        """The values pins and forgets without one hold, by command seq, as worked out."""
        text = UserText(tenant_id, user_id)
        self._users.add((tenant_id, user_id))
        self._held.extend((tenant_id, user_id, seq, text.seal_opt(v)) for seq, v in held.items())

    def facets(self, tenant_id: str, user_id: str, as_of: float,
               old: Mapping[FacetKey, FacetRow], new: Mapping[FacetKey, FacetRow],
               changed: Sequence[FacetRow], next_due_at: float | None,
               summaries: SummaryState, *, replace_all: bool = False) -> None:
        """The rebuilt cache and where the user now stands: the rows of `old` not in `new` go,
        `changed` (those of `new` that changed by more than decay: scoring.settled_rows) are
        written, the others keep their stored stability and `as_of` (readers decay them);
        `summaries`: how far they have come (`last_as_of` in it is ignored, `as_of` is the new
        one). `replace_all`: every stored row goes and all of `new` is written (rows stored
        unsealed are written again sealed). A later row of one (class, key) wins."""
        text = UserText(tenant_id, user_id)
        self._users.add((tenant_id, user_id))
        if replace_all:
            self._facets_cleared.append((tenant_id, user_id))
            changed = list(new.values())
        else:
            self._facets_gone.extend((tenant_id, user_id, c, text.seal(k))
                                     for c, k in old if (c, k) not in new)
        rows = {(r.facet_class, r.key): r for r in changed}
        self._facet_rows.extend((tenant_id, user_id, as_of, r, text) for r in rows.values())
        self._user_rows.append((tenant_id, user_id, as_of, next_due_at, summaries))

    async def flush(self, cur: AsyncCursor[Any]) -> None:
        """Make every gathered write (at most eight statements), and start empty again."""
        if self._stats_cleared:
            await _delete_users_rows(cur, VALUE_STATS, self._stats_cleared)
        if gone := self._stats_gone:
            await cur.execute(
                f"""DELETE FROM {VALUE_STATS} AS v USING
                      unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[])
                      AS g(t, u, c, k, val)
                    WHERE v.tenant_id = g.t AND v.user_id = g.u AND v.class = g.c
                      AND v.key = g.k AND v.value = g.val""",
                _columns(gone, 5))
        if changed := self._stats_changed:
            await cur.execute(
                f"""INSERT INTO {VALUE_STATS} (tenant_id, user_id, class, key, value, stats,
                        refs)
                    SELECT t, u, c, k, v, s::jsonb, r::jsonb
                    FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                                %b::text[], %b::text[]) AS x(t, u, c, k, v, s, r)
                    ON CONFLICT (tenant_id, user_id, class, key, value)
                    DO UPDATE SET stats = EXCLUDED.stats, refs = EXCLUDED.refs""",
                _columns(changed, 7))
        if held := self._held:
            await cur.execute(
                f"""UPDATE {COMMANDS} AS c SET held_value = h.v, held_known = true
                    FROM unnest(%b::text[], %b::text[], %b::int8[], %b::text[]) AS h(t, u, s, v)
                    WHERE c.tenant_id = h.t AND c.user_id = h.u AND c.seq = h.s""",
                _columns(held, 4))
        if self._facets_cleared:
            await _delete_users_rows(cur, FACETS, self._facets_cleared)
        if facets_gone := self._facets_gone:
            await cur.execute(
                f"""DELETE FROM {FACETS} f USING
                      unnest(%b::text[], %b::text[], %b::text[], %b::text[]) AS g(t, u, c, k)
                    WHERE f.tenant_id = g.t AND f.user_id = g.u AND f.class = g.c
                      AND f.key = g.k""",
                _columns(facets_gone, 4))
        if rows := self._facet_rows:
            await cur.execute(
                f"""INSERT INTO {FACETS} (tenant_id, user_id, class, key, value, state,
                        stability, user_state, evidence_refs, cue_counts, evidence_count,
                        first_seen_at, last_evidence_at, next_change_at, as_of, origin)
                    SELECT t, u, c, k, v, st, stab, us, refs::jsonb, cues::jsonb, n, first,
                           last, nxt, at, o
                    FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                                %b::text[], %b::float8[], %b::text[], %b::text[], %b::text[],
                                %b::int4[], %b::float8[], %b::float8[], %b::float8[],
                                %b::float8[], %b::text[])
                         AS x(t, u, c, k, v, st, stab, us, refs, cues, n, first, last, nxt,
                              at, o)
                    ON CONFLICT (tenant_id, user_id, class, key) DO UPDATE SET
                      value = EXCLUDED.value, state = EXCLUDED.state,
                      stability = EXCLUDED.stability, user_state = EXCLUDED.user_state,
                      evidence_refs = EXCLUDED.evidence_refs, cue_counts = EXCLUDED.cue_counts,
                      evidence_count = EXCLUDED.evidence_count,
                      first_seen_at = EXCLUDED.first_seen_at,
                      last_evidence_at = EXCLUDED.last_evidence_at,
                      next_change_at = EXCLUDED.next_change_at, as_of = EXCLUDED.as_of,
                      origin = EXCLUDED.origin""",
                ([t for t, *_ in rows], [u for _, u, *_ in rows],
                 [r.facet_class for *_, r, _ in rows],
                 [text.seal(r.key) for *_, r, text in rows],
                 [text.seal(r.value) for *_, r, text in rows],
                 [r.state for *_, r, _ in rows],
                 [None if math.isinf(r.stability) else r.stability for *_, r, _ in rows],
                 [r.user_state for *_, r, _ in rows],
                 [to_json(list(r.evidence_refs)).decode() for *_, r, _ in rows],
                 [to_json(dict(r.cue_counts)).decode() for *_, r, _ in rows],
                 [r.evidence_count for *_, r, _ in rows],
                 [r.first_seen_at for *_, r, _ in rows],
                 [r.last_evidence_at for *_, r, _ in rows],
                 [r.next_change_at for *_, r, _ in rows],
                 [at for _, _, at, _, _ in rows], [r.origin for *_, r, _ in rows]))
        if users := self._user_rows:
            await cur.execute(
                f"""INSERT INTO {USERS} (tenant_id, user_id, dirty, last_as_of, next_due_at,
                        folded_seq, deferred_seqs, summary_window)
                    SELECT t, u, false, at, due, folded, deferred::int8[], win
                    FROM unnest(%b::text[], %b::text[], %b::float8[], %b::float8[],
                                %b::int8[], %b::text[], %b::float8[])
                         AS x(t, u, at, due, folded, deferred, win)
                    ON CONFLICT (tenant_id, user_id) DO UPDATE SET
                      -- evidence newer than this rebuild's as_of still waits for one
                      dirty = coalesce({USERS}.last_candidate_at > EXCLUDED.last_as_of, false),
                      -- still waiting: evidence newer than as_of. Its oldest item is the old
                      -- pending_since if that is newer than as_of (a command's rebuild, which
                      -- keeps the clock); otherwise it is not known exactly and the newest
                      -- candidate bounds it (it arrived while this rebuild was on its way, so
                      -- the error is that lag)
                      pending_since = CASE
                        WHEN NOT coalesce({USERS}.last_candidate_at > EXCLUDED.last_as_of,
                                          false)
                          THEN NULL
                        WHEN {USERS}.pending_since > EXCLUDED.last_as_of
                          THEN {USERS}.pending_since
                        ELSE {USERS}.last_candidate_at END,
                      last_as_of = EXCLUDED.last_as_of, next_due_at = EXCLUDED.next_due_at,
                      folded_seq = EXCLUDED.folded_seq, deferred_seqs = EXCLUDED.deferred_seqs,
                      summary_window = EXCLUDED.summary_window""",
                ([t for t, *_ in users], [u for _, u, *_ in users],
                 [at for _, _, at, _, _ in users], [due for _, _, _, due, _ in users],
                 [s.folded_seq for *_, s in users],
                 ["{" + ",".join(map(str, s.deferred)) + "}" for *_, s in users],
                 [s.window for *_, s in users]))
        self._clear()


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> tuple[list[Any], ...]:
    """Rows as the columns an `unnest` of arrays takes."""
    return tuple([r[i] for r in rows] for i in range(width))


async def _delete_users_rows(cur: AsyncCursor[Any], table: str, users: Sequence[UserKey]
                             ) -> None:
    await cur.execute(
        f"DELETE FROM {table} AS x USING unnest(%b::text[], %b::text[]) AS w(t, u) "
        "WHERE x.tenant_id = w.t AND x.user_id = w.u", _columns(users, 2))


async def load_commands(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> list[Command]:
    return (await load_commands_and_held(cur, tenant_id, user_id))[0]


CommandsAndHeld = tuple[list[Command], dict[int, str | None]]


_COMMANDS_READ = "kind, at, seq, class, key, value, held_known, held_value"
_COMMANDS_ORDER = "ORDER BY x.seq"


def _commands_from(rows: Sequence[Sequence[Any]], text: UserText) -> CommandsAndHeld:
    commands: list[Command] = []
    held: dict[int, str | None] = {}
    for r in rows:
        commands.append(Command(r[0], float(r[1]), int(r[2]), r[3], text.open_opt(r[4]),
                                text.open_opt(r[5])))
        if r[6]:
            held[int(r[2])] = text.open_opt(r[7])
    return commands, held


async def commands_and_held_of(cur: AsyncCursor[Any], users: Sequence[UserKey]
                               ) -> dict[UserKey, CommandsAndHeld]:
    """Each user's commands in order, and the values pins and forgets without one hold, as
    recorded (by command seq): what a rebuild reads of them, every user in one statement."""
    rows = await _rows_by_user(cur, COMMANDS, _COMMANDS_READ, users, _COMMANDS_ORDER)
    return {user: _commands_from(found, UserText(*user)) for user, found in rows.items()}


async def load_commands_and_held(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                                 ) -> CommandsAndHeld:
    return (await commands_and_held_of(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


def _stability_out(value: Any) -> float:
    return math.inf if value is None else float(value)


_FACETS_READ = ("class, key, value, state, stability, user_state, evidence_refs, cue_counts, "
                "evidence_count, first_seen_at, last_evidence_at, next_change_at, origin, as_of")


def _facets_from(rows: Sequence[Sequence[Any]], text: UserText) -> dict[FacetKey, FacetRow]:
    found: dict[FacetKey, FacetRow] = {}
    for r in rows:
        key = text.open(r[1])
        found[(r[0], key)] = FacetRow(
            facet_class=r[0], key=key, value=text.open(r[2]), state=r[3],
            stability=_stability_out(r[4]), user_state=r[5],
            evidence_refs=tuple(r[6] or ()), cue_counts=dict(r[7] or {}),
            evidence_count=int(r[8]), first_seen_at=r[9], last_evidence_at=r[10],
            next_change_at=r[11], origin=r[12], as_of=r[13],
        )
    return found


async def facets_of(cur: AsyncCursor[Any], users: Sequence[UserKey]
                    ) -> dict[UserKey, dict[FacetKey, FacetRow]]:
    """Each user's facet rows, every user in one statement."""
    rows = await _rows_by_user(cur, FACETS, _FACETS_READ, users)
    return {user: _facets_from(found, UserText(*user)) for user, found in rows.items()}


async def load_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                      ) -> dict[FacetKey, FacetRow]:
    return (await facets_of(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


class RebuildInputs(NamedTuple):
    """What a rebuild reads of a user before it folds anything (`rebuild_inputs`)."""

    state: SummaryState
    commands: list[Command]
    held: dict[int, str | None]
    facets: dict[FacetKey, FacetRow]
    stats: UserStats
    #: some of the user's facets or summaries were stored unsealed (before sealing): the
    #: rebuild writes them all again, sealed, or the sealed rows would stand beside them
    unsealed: bool = False
    #: the evidence logged since the summaries were folded (and that which waited for its
    #: time), read with the rest when the summaries are kept (`_evidence_since_rows`)
    fresh: list[Evidence] | None = None


async def rebuild_inputs(cur: AsyncCursor[Any], users: Sequence[UserKey]
                         ) -> dict[UserKey, RebuildInputs | None]:
    """What the rebuilds of these users read first, in six statements for all of them (six
    per user before): a batch of rebuild requests costs its users' rows, not round trips. The
    refs of the values their new evidence names come too (the fold needs them; the others'
    stay unread, as they are most of a summary's size).

    None for a user whose keys were destroyed: erased, their rows are on their way out and
    nothing of them can be rebuilt; the others' inputs are read all the same."""
    distinct = list(dict.fromkeys(users))
    states = await summary_states(cur, distinct)
    commands = await _rows_by_user(cur, COMMANDS, _COMMANDS_READ, distinct, _COMMANDS_ORDER)
    facets = await _rows_by_user(cur, FACETS, _FACETS_READ, distinct)
    stats = await _rows_by_user(cur, VALUE_STATS, _STATS_READ, distinct)
    fresh = await _evidence_since_rows(cur, {user: state for user, state in states.items()
                                             if state.folded_seq is not None})
    refs = await _refs_of_values(cur, [(*user, r[1], r[2], r[3]) for user, rows in fresh.items()
                                       for r in rows])
    found: dict[UserKey, RebuildInputs | None] = {}
    for user in distinct:
        text = UserText(*user)
        try:
            user_stats = _stats_from(stats[user], text)
            for c, k, v, stored in refs.get(user, ()):  # the fold reads these: read already
                summary = user_stats.get((c, text.open(k)), {}).get(text.open(v))
                if summary is not None:
                    summary.refs = parse_refs(stored)
            found[user] = RebuildInputs(
                states[user], *_commands_from(commands[user], text),
                _facets_from(facets[user], text), user_stats,
                unsealed=text.written_plain(v for r in (*facets[user], *stats[user])
                                            for v in (r[1], r[2])),
                fresh=None if user not in fresh else [_evidence(r, text) for r in fresh[user]])
        except Shredded:
            found[user] = None
    return found


async def user_state(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                     ) -> tuple[float | None, bool]:
    """(last as_of, exists)."""
    await cur.execute(f"SELECT last_as_of FROM {USERS} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, user_id))
    row = await cur.fetchone()
    return (None, False) if row is None else (row[0], True)


async def save_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str, as_of: float,
                      old: Mapping[FacetKey, FacetRow], new: Mapping[FacetKey, FacetRow],
                      changed: Sequence[FacetRow], next_due_at: float | None,
                      summaries: SummaryState, *, replace_all: bool = False) -> None:
    """The rebuilt cache and where the user now stands (`RebuildWrites.facets`), now."""
    writes = RebuildWrites()
    writes.facets(tenant_id, user_id, as_of, old, new, changed, next_due_at, summaries,
                  replace_all=replace_all)
    await writes.flush(cur)


async def due_users(cur: AsyncCursor[Any], as_of: float, slot: int | None = None
                    ) -> list[tuple[str, str]]:
    """Users with new evidence or a threshold crossing due, of one slot (or of all): two
    index range scans, never a scan of every user; a slot's read only its own users."""
    if slot is None:
        await cur.execute(
            f"""SELECT tenant_id, user_id FROM {USERS} WHERE dirty
                UNION
                SELECT tenant_id, user_id FROM {USERS} WHERE next_due_at <= %s
                ORDER BY 1, 2""",
            (as_of,),
        )
    else:
        await cur.execute(
            f"""SELECT tenant_id, user_id FROM {USERS} WHERE slot = %s AND dirty
                UNION
                SELECT tenant_id, user_id FROM {USERS} WHERE slot = %s AND next_due_at <= %s
                ORDER BY 1, 2""",
            (slot, slot, as_of),
        )
    return [(r[0], r[1]) for r in await cur.fetchall()]


class Settled(NamedTuple):
    """A user the scheduler should rebuild now, and what identifies the request."""

    tenant_id: str
    user_id: str
    #: stream sequence of the user's latest candidate
    last_candidate_seq: int
    #: whether no evidence arrived for the debounce (else: the max wait ran out)
    quiet: bool
    pending_since: float | None
    last_as_of: float | None


async def settled_users(cur: AsyncCursor[Any], settled_before: float, waited_before: float
                        ) -> list[Settled]:
    """Dirty users whose newest candidate is at or before `settled_before` (the debounce) or
    whose oldest pending one is at or before `waited_before` (the max wait). Both halves are
    partial indexes over dirty users only: nothing dirty, nothing read."""
    await cur.execute(
        f"""SELECT tenant_id, user_id, last_candidate_seq, last_candidate_at <= %s,
                   pending_since, last_as_of
            FROM {USERS}
            WHERE dirty AND (last_candidate_at <= %s OR pending_since <= %s)
            ORDER BY 1, 2""",
        (settled_before, settled_before, waited_before),
    )
    return [Settled(r[0], r[1], int(r[2] or 0), bool(r[3]), r[4], r[5])
            for r in await cur.fetchall()]


async def pending_since(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> float | None:
    """When the user's oldest evidence not yet rebuilt arrived (its event time); None: none."""
    await cur.execute(f"SELECT pending_since, last_candidate_at FROM {USERS} "
                      "WHERE tenant_id = %s AND user_id = %s AND dirty", (tenant_id, user_id))
    row = await cur.fetchone()
    if row is None:
        return None
    since = row[0] if row[0] is not None else row[1]  # a row from before pending_since existed
    return None if since is None else float(since)
