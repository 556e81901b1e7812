"""Reading what the advisor, ICL and the learned policies need: the per-(class, model)
aggregates, a tenant's recent traces as `TraceFacts`, and recorded rewards in order."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncCursor

from habitus.routing.policies import Aggregate
from services.trace_router import store
from services.trace_router.insights import TraceFacts

#: how many of the newest traces the advisor and ICL read
RECENT = 10_000
#: how many of a user's newest traces a prompt's in-context section is chosen from (it is on
#: the path of a prompt, so it reads less)
RECENT_FOR_CONTEXT = 1_000


async def aggregates(cur: AsyncCursor[Any], tenant_id: str) -> dict[tuple[str, str], Aggregate]:
    rows = await store.class_stats(cur, tenant_id)
    out: dict[tuple[str, str], Aggregate] = {}
    for r in rows:
        out[(r["query_class"], r["model"])] = Aggregate(
            count=r["count"], successes=r["successes"], outcomes_known=r["outcomes_known"],
            feedback_sum=r["feedback_sum"], feedback_n=r["feedback_count"],
            reward_sum=r["reward_sum"], reward_n=r["reward_count"])
    return out


async def recent(cur: AsyncCursor[Any], tenant_id: str, user_id: str | None = None,
                 limit: int = RECENT, *, queries: bool = True) -> list[TraceFacts]:
    """The newest traces (of the user, or of every user), as the advisor and ICL read them.

    `queries`: open each trace's query (sealed for its user); without, `query` is empty (the
    advisor and the skills never read it, and opening is a cipher call per trace). The traces
    of a user whose keys were destroyed are left out when their queries are opened."""
    # without the queries, neither read nor grouped by (the sealed text is long)
    text, grouped = ("t.query", "t.query, ") if queries else ("''", "")
    sql = f"""SELECT t.user_id, t.trace_id, {text}, t.model, t.agent, t.outcome, t.feedback,
                     t.total_latency_seconds, t.query_class, t.ended_at,
                     coalesce(array_agg(s.tool_name ORDER BY s.ordinal)
                              FILTER (WHERE s.tool_name IS NOT NULL), '{{}}')
              FROM (SELECT * FROM {store.TRACES} WHERE tenant_id = %s
                    {"AND user_id = %s" if user_id else ""}
                    ORDER BY started_at DESC LIMIT %s) t
              LEFT JOIN {store.STEPS} s ON s.tenant_id = t.tenant_id
                AND s.user_id = t.user_id AND s.trace_id = t.trace_id
              GROUP BY t.user_id, t.trace_id, {grouped}t.model, t.agent, t.outcome,
                       t.feedback, t.total_latency_seconds, t.query_class, t.ended_at"""
    params: list[Any] = [tenant_id, *([user_id] if user_id else []), limit]
    await cur.execute(sql, params)
    rows = [{"user_id": r[0], "query": r[2], "result": "", "r": r}
            for r in await cur.fetchall()]
    if queries:
        rows = store.Opener(tenant_id).traces(rows)
    return [TraceFacts(trace_id=r[1], query=row["query"], model=r[3], agent=r[4],
                       outcome=r[5], feedback=None if r[6] is None else float(r[6]),
                       latency_seconds=float(r[7]), query_class=r[8], ended_at=float(r[9]),
                       tool_sequence=tuple(r[10]))
            for row in rows for r in (row["r"],)]


async def rewards(cur: AsyncCursor[Any], tenant_id: str, limit: int = RECENT
                  ) -> list[tuple[str, str, float]]:
    """(class, model, reward) of the newest traces with a reward, oldest first: the groups
    GRPO learns from."""
    await cur.execute(
        f"""SELECT query_class, model, reward FROM (
              SELECT query_class, model, reward, seq FROM {store.TRACES}
              WHERE tenant_id = %s AND reward IS NOT NULL ORDER BY seq DESC LIMIT %s) r
            ORDER BY seq""", (tenant_id, limit))
    return [(r[0], r[1], float(r[2])) for r in await cur.fetchall()]


async def tenants(cur: AsyncCursor[Any]) -> list[str]:
    await cur.execute(f"SELECT DISTINCT tenant_id FROM {store.CLASS_STATS}")
    return [r[0] for r in await cur.fetchall()]


def below(aggregates: dict[tuple[str, str], Aggregate], min_samples: int) -> list[str]:
    """The query classes with traces, but fewer than `min_samples` of them."""
    counts: dict[str, int] = {}
    for (cls, _), agg in aggregates.items():
        counts[cls] = counts.get(cls, 0) + agg.count
    return sorted(c for c, n in counts.items() if 0 < n < min_samples)


async def observations(cur: AsyncCursor[Any], tenant_id: str, classes: list[str]
                       ) -> list[tuple[str, str, str | None, float | None]]:
    """(class, model, outcome, feedback) of the tenant's traces of `classes`, in the order
    they were recorded: what the online switch replays (few: the classes are below the
    sample threshold)."""
    if not classes:
        return []
    await cur.execute(
        f"""SELECT query_class, model, outcome, feedback FROM {store.TRACES}
            WHERE tenant_id = %s AND query_class = ANY(%s) ORDER BY seq""",
        (tenant_id, classes))
    return [(r[0], r[1], r[2], None if r[3] is None else float(r[3]))
            for r in await cur.fetchall()]
