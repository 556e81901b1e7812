"""The `producers` schema: per-session heuristic state, so a restart or a second replica
continues exactly where the last batch left off."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

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
    if not states:
        return
    await cur.executemany(
        f"""INSERT INTO {SESSIONS} (tenant_id, user_id, session_id, state, last_seq)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE
              SET state = EXCLUDED.state, last_seq = EXCLUDED.last_seq""",
        [(t, u, s, Jsonb(state), seq) for (t, u, s), (state, seq) in sorted(states.items())],
    )
