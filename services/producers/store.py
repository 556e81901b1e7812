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
                        ) -> dict[SessionKey, str]:
    """Each stored session's document as its JSON text (read by `session_doc.read_session`,
    straight from the text)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    await cur.execute(
        # the state as text: validated by pydantic-core from it, never parsed into dicts first
        f"""SELECT s.tenant_id, s.user_id, s.session_id, s.state::text FROM {SESSIONS} s
            JOIN unnest(%b::text[], %b::text[], %b::text[]) AS k(t, u, sid)
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
    # The whole batch is one JSON document serialised in C (pydantic-core): as text arrays, the
    # states' quotes were escaped element by element in Python, the producers' largest cost.
    rows = to_json([[t, u, sid, state, seq]
                    for (t, u, sid), (state, seq) in sorted(states.items())]).decode()
    await cur.execute(
        f"""INSERT INTO {SESSIONS} (tenant_id, user_id, session_id, state, last_seq)
            SELECT r->>0, r->>1, r->>2, r->3, (r->>4)::int8
            FROM jsonb_array_elements(%s::jsonb) AS r
            ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE
              SET state = EXCLUDED.state, last_seq = EXCLUDED.last_seq""",
        (rows,),
    )
