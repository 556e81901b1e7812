"""The `producers` schema: per-session heuristic state, so a restart or a second replica
continues exactly where the last batch left off."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from psycopg import AsyncCursor
from pydantic_core import to_json

SCHEMA = "producers"
SESSIONS = f"{SCHEMA}.sessions"
TABLES = (SESSIONS,)
SessionKey = tuple[str, str, str]  # tenant, user, session


async def load_sessions(cur: AsyncCursor[Any], keys: Iterable[SessionKey]
                        ) -> dict[SessionKey, dict[str, Any]]:
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    await cur.execute(
        f"""SELECT s.tenant_id, s.user_id, s.session_id, s.state FROM {SESSIONS} s
            JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(t, u, sid)
              ON s.tenant_id = k.t AND s.user_id = k.u AND s.session_id = k.sid""",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[2] for k in wanted]),
    )
    return {(r[0], r[1], r[2]): r[3] for r in await cur.fetchall()}


async def save_sessions(cur: AsyncCursor[Any],
                        states: Mapping[SessionKey, tuple[dict[str, Any], int]]) -> None:
    """Upsert every session of the batch in one statement (each key once: a batch's later
    turns of a session are folded into its one state before this is called)."""
    if not states:
        return
    ordered = sorted(states.items())
    await cur.execute(
        f"""INSERT INTO {SESSIONS} (tenant_id, user_id, session_id, state, last_seq)
            SELECT t, u, s, st::jsonb, q
            FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int8[])
                 AS k(t, u, s, st, q)
            ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE
              SET state = EXCLUDED.state, last_seq = EXCLUDED.last_seq""",
        ([t for (t, _, _), _ in ordered], [u for (_, u, _), _ in ordered],
         [s for (_, _, s), _ in ordered],
         # one serializer call per state in C (pydantic-core), not psycopg's Jsonb dumper
         [to_json(state).decode() for _, (state, _) in ordered],
         [seq for _, (_, seq) in ordered]),
    )
