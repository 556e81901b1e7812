"""The `habits` schema: SQL for the ledger, its audit and duplicate pairs, tenants' law and
settings, and what Analyze reads and keeps. Tenant-wide rows belong to the user `_tenant`.

What a person said, and what was made of it, is kept sealed with the user's column key
(habitus.crypto.columns), so erasure, by destroying the key, leaves every copy of it in the
heap, the WAL and the backups unreadable: an observation's text (and its checksum, a hash that
would confirm a guessed turn), a habit's wording, evidence and approved identity (also a hash of
the wording) inside `state` and in the audit's snapshots, the model's stored answers and the
quarantined items, and a law or project names stored under a user. The rest of a habit's state
stays plain JSON, and what SQL filters and sorts on (status, times, ids) has columns of its
own, so no statement reads a sealed value. The tenant's own rows (`_tenant`) stay plain.

Rows are sealed on the way in and opened on the way out: a read of one user's rows raises
`Shredded` once that user's keys are destroyed (their rows are being erased), a read across
users (`active_in_tenant`) passes such a user over.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from habitus.crypto import Shredded
from habitus.crypto.columns import COLUMNS, is_sealed
from habitus.ids import TENANT_WIDE
from services.habits.ledger import Habit

SCHEMA = "habits"
HABITS = f"{SCHEMA}.habits"
AUDIT = f"{SCHEMA}.audit"
DUPLICATES = f"{SCHEMA}.duplicates"
LAWS = f"{SCHEMA}.laws"
SETTINGS = f"{SCHEMA}.tenant_settings"
OBSERVATIONS = f"{SCHEMA}.observations"
WATERMARKS = f"{SCHEMA}.watermarks"
ANSWERS = f"{SCHEMA}.answers"
QUARANTINE = f"{SCHEMA}.quarantine"


#: the fields of a habit's state that hold a person's words, or a hash that would confirm a
#: guess of them (the approved identity), sealed as text
SEALED_TEXT = ("condition", "behavior", "approved_identity")
#: and those sealed as JSON (the evidence references)
SEALED_JSON = ("evidence",)


class Sealer:
    """Seals one user's values, each distinct text once: a change's before and after (and the
    habit's row and its audit) mostly share their wording."""

    def __init__(self, tenant_id: str, user_id: str) -> None:
        self.tenant_id = tenant_id
        self.user_id = user_id
        self._memo: dict[str, str] = {}

    def text(self, value: str) -> str:
        sealed = self._memo.get(value)
        if sealed is None:
            sealed = self._memo[value] = COLUMNS.seal(self.tenant_id, self.user_id, value)
        return sealed

    def json(self, value: Any) -> Any:
        """`value` as COLUMNS.seal_json seals it (as it is when nothing is sealed here)."""
        sealed = self.text(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        return sealed if is_sealed(sealed) else value

    def state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A habit's state with its text fields sealed (empty ones left as they are)."""
        out = dict(state)
        for key in SEALED_TEXT:
            if isinstance(out.get(key), str):
                out[key] = self.text(out[key])
        for key in SEALED_JSON:
            if out.get(key):
                out[key] = self.json(out[key])
        return out


def open_state(tenant_id: str, user_id: str, state: Any) -> dict[str, Any]:
    """What `Sealer.state` sealed, opened (a state stored before sealing, as it is)."""
    out = dict(state if isinstance(state, dict) else json.loads(state))
    for key in SEALED_TEXT:
        if isinstance(out.get(key), str):
            out[key] = COLUMNS.open(tenant_id, user_id, out[key])
    for key in SEALED_JSON:
        out[key] = COLUMNS.open_json(tenant_id, user_id, out.get(key, []))
    return out


def _habit(tenant_id: str, user_id: str, state: Any) -> Habit:
    return Habit.from_state(open_state(tenant_id, user_id, state))


async def load_habit(cur: AsyncCursor[Any], tenant_id: str, user_id: str, habit_id: str,
                     *, for_update: bool = False) -> Habit | None:
    lock = " FOR UPDATE" if for_update else ""
    await cur.execute(f"SELECT state FROM {HABITS} WHERE tenant_id = %s AND user_id = %s "
                      f"AND habit_id = %s{lock}", (tenant_id, user_id, habit_id))
    row = await cur.fetchone()
    return None if row is None else _habit(tenant_id, user_id, row[0])


async def load_habits(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                      statuses: Sequence[str] | None = None) -> list[Habit]:
    """In creation order (then id): the order numbered review lists keep."""
    where = "tenant_id = %s AND user_id = %s"
    args: list[Any] = [tenant_id, user_id]
    if statuses is not None:
        where += " AND status = ANY(%s)"
        args.append(list(statuses))
    await cur.execute(f"SELECT state FROM {HABITS} WHERE {where} "
                      "ORDER BY created_at, habit_id", args)
    return [_habit(tenant_id, user_id, r[0]) for r in await cur.fetchall()]


async def habits_by_id(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                       habit_ids: Sequence[str]) -> dict[str, Habit]:
    await cur.execute(f"SELECT state FROM {HABITS} WHERE tenant_id = %s AND user_id = %s "
                      "AND habit_id = ANY(%s)", (tenant_id, user_id, list(habit_ids)))
    found = [_habit(tenant_id, user_id, r[0]) for r in await cur.fetchall()]
    return {h.habit_id: h for h in found}


async def active_in_tenant(cur: AsyncCursor[Any], tenant_id: str,
                           statuses: Sequence[str] = ("active",)) -> list[tuple[str, Habit]]:
    """(user, habit) of every user of the tenant, in these statuses; a user whose keys were
    destroyed meanwhile (being erased) is passed over, not a failure of the whole list."""
    await cur.execute(f"SELECT user_id, state FROM {HABITS} WHERE tenant_id = %s "
                      "AND status = ANY(%s) ORDER BY user_id, habit_id",
                      (tenant_id, list(statuses)))
    found: list[tuple[str, Habit]] = []
    shredded: set[str] = set()
    for user_id, state in await cur.fetchall():
        if user_id in shredded:
            continue
        try:
            found.append((user_id, _habit(tenant_id, user_id, state)))
        except Shredded:
            shredded.add(user_id)
    return [(u, h) for u, h in found if u not in shredded]


@dataclass(frozen=True)
class Change:
    """The event that changed a habit, as its audit row records it."""

    event_id: str
    event_type: str
    seq: int
    at: float
    actor: str


async def save_habit(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                     before: Habit | None, after: Habit, change: Change) -> None:
    """The habit's row and the audit row of the change (before and after), the state sealed
    once for both."""
    sealer = Sealer(tenant_id, user_id)
    state = sealer.state(after.state())
    await cur.execute(
        f"""INSERT INTO {HABITS} (tenant_id, user_id, habit_id, status, confidence_bp, law_hash,
                checksum, created_at, updated_at, state)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, habit_id) DO UPDATE SET
                status = EXCLUDED.status, confidence_bp = EXCLUDED.confidence_bp,
                law_hash = EXCLUDED.law_hash, checksum = EXCLUDED.checksum,
                updated_at = EXCLUDED.updated_at, state = EXCLUDED.state""",
        (tenant_id, user_id, after.habit_id, after.status.value, after.confidence_bp,
         after.law_hash, after.checksum, after.created_at, after.updated_at,
         Jsonb({**state, "checksum": after.checksum})))
    await cur.execute(
        f"""INSERT INTO {AUDIT} (tenant_id, user_id, habit_id, event_id, event_type, seq, at,
                actor, before, after)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        (tenant_id, user_id, after.habit_id, change.event_id, change.event_type, change.seq,
         change.at, change.actor,
         None if before is None else Jsonb(sealer.state(before.state())), Jsonb(state)))


@dataclass(frozen=True)
class AuditEntry:
    event_id: str
    event_type: str
    seq: int
    at: float
    actor: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


async def audit_trail(cur: AsyncCursor[Any], tenant_id: str, user_id: str, habit_id: str,
                      limit: int = 200) -> list[AuditEntry]:
    """The habit's changes, oldest first, their snapshots opened."""
    await cur.execute(
        f"""SELECT event_id, event_type, seq, at, actor, before, after FROM {AUDIT}
            WHERE tenant_id = %s AND user_id = %s AND habit_id = %s
            ORDER BY seq DESC LIMIT %s""", (tenant_id, user_id, habit_id, limit))

    def opened(state: Any) -> dict[str, Any] | None:
        return None if state is None else open_state(tenant_id, user_id, state)

    return [AuditEntry(r[0], r[1], int(r[2]), float(r[3]), r[4], opened(r[5]), opened(r[6]))
            for r in await cur.fetchall()][::-1]


@dataclass(frozen=True)
class PairRow:
    first_id: str
    second_id: str
    similarity_bp: int
    strong: bool
    decision: str

    def other(self, habit_id: str) -> str:
        return self.second_id if habit_id == self.first_id else self.first_id


async def upsert_pair(cur: AsyncCursor[Any], tenant_id: str, user_id: str, first: str,
                      second: str, similarity_bp: int, strong: bool, at: float) -> None:
    """A pair found again keeps the decision a person made about it."""
    await cur.execute(
        f"""INSERT INTO {DUPLICATES} (tenant_id, user_id, first_id, second_id, similarity_bp,
                strong, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, first_id, second_id) DO UPDATE SET
                similarity_bp = EXCLUDED.similarity_bp, strong = EXCLUDED.strong,
                updated_at = EXCLUDED.updated_at""",
        (tenant_id, user_id, first, second, similarity_bp, strong, at))


async def resolve_pair(cur: AsyncCursor[Any], tenant_id: str, user_id: str, first: str,
                       second: str, decision: str, at: float) -> None:
    await cur.execute(
        f"""UPDATE {DUPLICATES} SET decision = %s, updated_at = %s WHERE tenant_id = %s
            AND user_id = %s AND first_id = %s AND second_id = %s""",
        (decision, at, tenant_id, user_id, first, second))


async def pairs(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> list[PairRow]:
    await cur.execute(
        f"""SELECT first_id, second_id, similarity_bp, strong, decision FROM {DUPLICATES}
            WHERE tenant_id = %s AND user_id = %s ORDER BY first_id, second_id""",
        (tenant_id, user_id))
    return [PairRow(r[0], r[1], int(r[2]), bool(r[3]), r[4]) for r in await cur.fetchall()]


async def law(cur: AsyncCursor[Any], tenant_id: str) -> tuple[str, str] | None:
    """(text, hash) of the tenant's law, None when it never set one."""
    await cur.execute(f"SELECT text, law_hash FROM {LAWS} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, TENANT_WIDE))
    row = await cur.fetchone()
    return None if row is None else (COLUMNS.open(tenant_id, TENANT_WIDE, row[0]), row[1])


async def set_law(cur: AsyncCursor[Any], tenant_id: str, user_id: str, text: str, law_hash: str,
                  at: float) -> None:
    """Stored under the event's owner: only `_tenant`'s law is the tenant's (and plain); one
    stored under a user is that user's words, sealed."""
    await cur.execute(
        f"""INSERT INTO {LAWS} (tenant_id, user_id, text, law_hash, updated_at)
            VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, user_id) DO UPDATE SET
                text = EXCLUDED.text, law_hash = EXCLUDED.law_hash,
                updated_at = EXCLUDED.updated_at""",
        (tenant_id, user_id, COLUMNS.seal(tenant_id, user_id, text), law_hash, at))


@dataclass(frozen=True)
class TenantSettings:
    retention_days: int = 7
    scheduled_analyze: bool = False
    project_names: tuple[str, ...] = field(default=())


async def tenant_settings(cur: AsyncCursor[Any], tenant_id: str) -> TenantSettings:
    await cur.execute(
        f"""SELECT retention_days, scheduled_analyze, project_names FROM {SETTINGS}
            WHERE tenant_id = %s AND user_id = %s""", (tenant_id, TENANT_WIDE))
    row = await cur.fetchone()
    if row is None:
        return TenantSettings()
    return TenantSettings(int(row[0]), bool(row[1]),
                          tuple(COLUMNS.open_all(tenant_id, TENANT_WIDE, row[2] or ())))


async def retention_days_of(cur: AsyncCursor[Any], tenant_ids: Collection[str]
                            ) -> dict[str, int]:
    """Each tenant's observation retention in days (the default where a tenant set none):
    what capturing a batch of turns needs, read for all of its tenants in one statement
    rather than one settings read per tenant."""
    if not tenant_ids:
        return {}
    await cur.execute(
        f"""SELECT tenant_id, retention_days FROM {SETTINGS}
            WHERE tenant_id = ANY(%b::text[]) AND user_id = %s""",
        (list(tenant_ids), TENANT_WIDE))
    found = {str(t): int(days) for t, days in await cur.fetchall()}
    return {t: found.get(t, TenantSettings.retention_days) for t in tenant_ids}


async def set_tenant_settings(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                              s: TenantSettings, at: float) -> None:
    """Stored under the event's owner, like the law (project names under a user, sealed)."""
    await cur.execute(
        f"""INSERT INTO {SETTINGS} (tenant_id, user_id, retention_days, scheduled_analyze,
                project_names, updated_at) VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET
                retention_days = EXCLUDED.retention_days,
                scheduled_analyze = EXCLUDED.scheduled_analyze,
                project_names = EXCLUDED.project_names, updated_at = EXCLUDED.updated_at""",
        (tenant_id, user_id, s.retention_days, s.scheduled_analyze,
         COLUMNS.seal_all(tenant_id, user_id, s.project_names), at))


async def scheduled_tenants(cur: AsyncCursor[Any]) -> list[str]:
    await cur.execute(f"SELECT tenant_id FROM {SETTINGS} WHERE scheduled_analyze "
                      "ORDER BY tenant_id")
    return [r[0] for r in await cur.fetchall()]


@dataclass(frozen=True)
class Observation:
    seq: int
    event_id: str
    session_id: str
    turn_id: str
    day: str
    text: str
    bytes: int
    checksum: str
    observed_at: float
    expires_at: float


async def add_observations(cur: AsyncCursor[Any],
                           rows: Sequence[tuple[str, str, Observation]]) -> None:
    """Store a batch's observations, (tenant, user, observation) each, in one statement: a
    row per turn was a statement per turn, the habits' whole share of Postgres under load.
    The text and its checksum are sealed for the turn's user."""
    if not rows:
        return
    columns = ("tenant_id", "user_id", "seq", "event_id", "session_id", "turn_id", "day",
               "text", "bytes", "checksum", "observed_at", "expires_at")
    types = ("text", "text", "int8", "text", "text", "text", "text", "text", "int8", "text",
             "float8", "float8")
    values = [(t, u, o.seq, o.event_id, o.session_id, o.turn_id, o.day,
               COLUMNS.seal(t, u, o.text), o.bytes, COLUMNS.seal(t, u, o.checksum),
               o.observed_at, o.expires_at) for t, u, o in rows]
    await cur.execute(
        f"""INSERT INTO {OBSERVATIONS} ({", ".join(columns)})
            SELECT * FROM unnest({", ".join(f"%b::{t}[]" for t in types)})
            ON CONFLICT DO NOTHING""",
        [list(column) for column in zip(*values, strict=True)])


async def unread(cur: AsyncCursor[Any], tenant_id: str, user_id: str, after_seq: int,
                 upto_seq: int) -> list[Observation]:
    await cur.execute(
        f"""SELECT seq, event_id, session_id, turn_id, day, text, bytes, checksum, observed_at,
                expires_at FROM {OBSERVATIONS} WHERE tenant_id = %s AND user_id = %s
                AND seq > %s AND seq <= %s ORDER BY seq""",
        (tenant_id, user_id, after_seq, upto_seq))
    return [Observation(int(r[0]), r[1], r[2], r[3], r[4],
                        COLUMNS.open(tenant_id, user_id, r[5]), int(r[6]),
                        COLUMNS.open(tenant_id, user_id, r[7]), float(r[8]), float(r[9]))
            for r in await cur.fetchall()]


async def count_unread(cur: AsyncCursor[Any], tenant_id: str, user_id: str, after_seq: int,
                       upto_seq: int) -> int:
    """How many `unread` would return, without reading (and opening) their texts."""
    await cur.execute(
        f"""SELECT count(*) FROM {OBSERVATIONS} WHERE tenant_id = %s AND user_id = %s
                AND seq > %s AND seq <= %s""", (tenant_id, user_id, after_seq, upto_seq))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def last_observed(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> int:
    await cur.execute(f"SELECT coalesce(max(seq), 0) FROM {OBSERVATIONS} "
                      "WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def users_with_unread(cur: AsyncCursor[Any], tenant_id: str) -> list[str]:
    await cur.execute(
        f"""SELECT DISTINCT o.user_id FROM {OBSERVATIONS} o LEFT JOIN {WATERMARKS} w
                ON w.tenant_id = o.tenant_id AND w.user_id = o.user_id
            WHERE o.tenant_id = %s AND o.seq > coalesce(w.analyzed_seq, 0)
            ORDER BY o.user_id""", (tenant_id,))
    return [r[0] for r in await cur.fetchall()]


async def expire_observations(cur: AsyncCursor[Any], now: float) -> int:
    await cur.execute(f"DELETE FROM {OBSERVATIONS} WHERE expires_at <= %s", (now,))
    return cur.rowcount


async def watermark(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> int:
    await cur.execute(f"SELECT analyzed_seq FROM {WATERMARKS} WHERE tenant_id = %s "
                      "AND user_id = %s", (tenant_id, user_id))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def advance_watermark(cur: AsyncCursor[Any], tenant_id: str, user_id: str, seq: int,
                            at: float) -> None:
    await cur.execute(
        f"""INSERT INTO {WATERMARKS} (tenant_id, user_id, analyzed_seq, batches, last_run_at,
                updated_at) VALUES (%s, %s, %s, 1, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET
                analyzed_seq = greatest({WATERMARKS}.analyzed_seq, EXCLUDED.analyzed_seq),
                batches = {WATERMARKS}.batches + 1, last_run_at = EXCLUDED.last_run_at,
                updated_at = EXCLUDED.updated_at""", (tenant_id, user_id, seq, at, at))


async def stored_answer(cur: AsyncCursor[Any], tenant_id: str, user_id: str, first: int,
                        last: int, prompt_version: str) -> tuple[str, Any] | None:
    await cur.execute(
        f"""SELECT model, answer FROM {ANSWERS} WHERE tenant_id = %s AND user_id = %s
            AND first_seq = %s AND last_seq = %s AND prompt_version = %s""",
        (tenant_id, user_id, first, last, prompt_version))
    row = await cur.fetchone()
    return None if row is None else (row[0], COLUMNS.open_json(tenant_id, user_id, row[1]))


async def store_answer(cur: AsyncCursor[Any], tenant_id: str, user_id: str, first: int,
                       last: int, prompt_version: str, model: str, answer: Any, at: float
                       ) -> None:
    await cur.execute(
        f"""INSERT INTO {ANSWERS} (tenant_id, user_id, first_seq, last_seq, prompt_version,
                model, answer, answered_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT DO NOTHING""",
        (tenant_id, user_id, first, last, prompt_version, model,
         Jsonb(COLUMNS.seal_json(tenant_id, user_id, answer)), at))


async def quarantine(cur: AsyncCursor[Any], tenant_id: str, user_id: str, first: int,
                     last: int, items: Sequence[tuple[str, Any]], model: str, at: float
                     ) -> None:
    await cur.executemany(
        f"""INSERT INTO {QUARANTINE} (tenant_id, user_id, first_seq, last_seq, position, reason,
                item, model, at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT DO NOTHING""",
        [(tenant_id, user_id, first, last, i, reason,
          Jsonb(COLUMNS.seal_json(tenant_id, user_id, item)), model, at)
         for i, (reason, item) in enumerate(items)])


async def quarantined(cur: AsyncCursor[Any], tenant_id: str, user_id: str, limit: int = 100
                      ) -> list[tuple[int, int, str, Any, str, float]]:
    await cur.execute(
        f"""SELECT first_seq, last_seq, reason, item, model, at FROM {QUARANTINE}
            WHERE tenant_id = %s AND user_id = %s ORDER BY at DESC, first_seq, position
            LIMIT %s""", (tenant_id, user_id, limit))
    return [(int(r[0]), int(r[1]), r[2], COLUMNS.open_json(tenant_id, user_id, r[3]), r[4],
             float(r[5])) for r in await cur.fetchall()]
