"""The trace store on real servers: `TracesProjection` run by a real ProjectionRunner (scoped to
the test's tenant), read back through `services.trace_router.store`.

The service is not an installed entry point yet, so its migrations folder is applied directly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from alembic import command

from habitus.db.migrate import alembic_config
from habitus.events import CATALOG, Event
from habitus.events.ingest import FeedbackGiven, TraceCompleted, TraceStep
from services.trace_router import store
from services.trace_router.projection import TracesProjection
from tests.conftest import ServerUrls
from tests.contract.harness import Scoped, erase_tenant, publish, reset_for_replay, snapshot
from tests.support.factories import unique

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "trace_router" / "migrations"
T0 = 1_700_000_000.0


@pytest_asyncio.fixture(scope="module")
async def migrated(servers: ServerUrls) -> None:
    command.upgrade(alembic_config(servers.database, "traces", MIGRATIONS), "head")


_n = iter(range(1, 10**9))


def trace(tenant: str, user: str, trace_id: str, *, model: str = "qwen3:8b",
          agent: str = "helper", outcome: str | None = None, feedback: float | None = None,
          query: str = "What is the weather like today in the city?", result: str = "Sunny.",
          steps: Sequence[TraceStep] = (), started_at: float | None = None,
          latency: float = 1.0, tokens: int = 100, cost: float | None = None) -> Event[Any]:
    at = started_at if started_at is not None else T0 + next(_n)
    return CATALOG.new(
        TraceCompleted(trace_id=trace_id, query=query, agent=agent, model=model, engine="ollama",
                       steps=list(steps), result=result, outcome=outcome, feedback=feedback,
                       started_at=at, ended_at=at + latency, total_tokens=tokens,
                       total_latency_seconds=latency, cost_usd=cost),
        tenant_id=tenant, user_id=user, producer="tests", occurred_at=at)


def feedback(tenant: str, user: str, trace_id: str, score: float,
             outcome: str | None = None) -> Event[Any]:
    return CATALOG.new(FeedbackGiven(trace_id=trace_id, score=score, outcome=outcome),
                       tenant_id=tenant, user_id=user, producer="tests",
                       occurred_at=T0 + next(_n))


def step(step_type: str = "tool_call", *, input: Any = None, output: Any = None,
         metadata: dict[str, Any] | None = None, duration: float = 0.5) -> TraceStep:
    return TraceStep(step_type=step_type, timestamp=T0, duration_seconds=duration,
                     input=input, output=output, metadata=metadata or {})


async def project(nc: Any, pool: Any, tenant: str, events: Sequence[Event[Any]],
                  scoped: Scoped | None = None, batch_size: int = 500) -> Scoped:
    await publish(nc, events)
    scoped = scoped or Scoped.of(TracesProjection(), tenant)
    await scoped.run(nc, pool, batch_size=batch_size)
    return scoped


async def read(pool: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    async with pool.connection() as conn, conn.cursor() as cur:
        return await fn(cur, *args, **kwargs)


def by_model(stats: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["model"]: s for s in stats}


def close(a: Any, b: Any) -> bool:
    """Equal, numbers to a relative 1e-9 (sums from the traces are summed in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return bool(a == pytest.approx(b, rel=1e-9, abs=1e-12))
    return bool(a == b)


TIME = store.TraceFilters(since=0.0)  # a time filter: answered from the traces, not aggregates


async def test_analyzer_vectors(nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    await project(nc, pool, tenant, [
        trace(tenant, "u1", "a", outcome="success", feedback=0.9),
        trace(tenant, "u1", "b", outcome="success", feedback=0.8),
        trace(tenant, "u1", "c", model="llama3.2:3b", outcome="failure"),
        trace(tenant, "u2", "d", model="mistral", outcome=None)])

    summary = await read(pool, store.summary, tenant)
    assert summary["traces"] == 4
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["avg_feedback"] == pytest.approx(0.85)
    routes = by_model(await read(pool, store.route_stats, tenant))
    assert routes["qwen3:8b"]["success_rate"] == 1.0
    assert routes["qwen3:8b"]["avg_feedback"] == pytest.approx(0.85)
    assert routes["llama3.2:3b"]["success_rate"] == 0.0
    assert routes["llama3.2:3b"]["avg_feedback"] is None
    assert routes["mistral"]["success_rate"] == 0.0  # no outcome: 0.0, not an error
    assert routes["mistral"]["avg_feedback"] is None
    only_none = await read(pool, store.summary, tenant, store.TraceFilters(user_id="u2"))
    assert (only_none["traces"], only_none["success_rate"], only_none["avg_feedback"]) == (
        1, 0.0, None)
    # the same figures from the traces themselves (a time filter has no aggregate)
    assert close(await read(pool, store.route_stats, tenant, TIME),
                 await read(pool, store.route_stats, tenant))
    failures = await read(pool, store.summary, tenant, store.TraceFilters(outcome="failure"))
    assert (failures["traces"], failures["success_rate"]) == (1, 0.0)
    empty = await read(pool, store.summary, unique("nobody"))
    assert (empty["traces"], empty["success_rate"], empty["avg_feedback"]) == (0, 0.0, None)


async def test_feedback_before_and_after_its_trace(nc: Any, pool: Any, migrated: None) -> None:
    early, late = unique("tr"), unique("tr")
    at = T0 + 500
    # early: both scores arrive before the trace; late: the trace first, then both scores
    await project(nc, pool, early, [
        feedback(early, "u1", "x", 0.2, "failure"), feedback(early, "u1", "x", 0.4),
        trace(early, "u1", "x", outcome="success", started_at=at)])
    scoped = await project(nc, pool, late, [
        trace(late, "u1", "x", outcome="success", started_at=at),
        feedback(late, "u1", "x", 0.2, "failure"), feedback(late, "u1", "x", 0.4)])

    for tenant in (early, late):
        got = await read(pool, store.get_trace, tenant, "x")
        assert (got["feedback"], got["outcome"]) == (0.4, "failure")  # latest score, outcome
        routes = await read(pool, store.route_stats, tenant)
        assert [(r["count"], r["successes"], r["outcomes_known"], r["avg_feedback"])
                for r in routes] == [(1, 0, 1, pytest.approx(0.4))]
        rows = await snapshot(pool, TracesProjection(), tenant)
        assert rows[store.PENDING_FEEDBACK] == []
    a = await snapshot(pool, TracesProjection(), early)
    b = await snapshot(pool, TracesProjection(), late)
    for table in (store.ROUTE_STATS, store.CLASS_STATS, store.TOOL_STATS, store.STEP_STATS):
        assert [{**r, "tenant_id": ""} for r in a[table]] == [
            {**r, "tenant_id": ""} for r in b[table]], table

    # a later score with an outcome replaces the earlier one's share of the aggregates
    await project(nc, pool, late, [feedback(late, "u1", "x", 1.0, "success")], scoped)
    routes = await read(pool, store.route_stats, late)
    assert [(r["count"], r["successes"], r["success_rate"], r["avg_feedback"])
            for r in routes] == [(1, 1, 1.0, 1.0)]
    classes = await read(pool, store.class_stats, late)
    assert [(c["count"], c["successes"], c["feedback_count"]) for c in classes] == [(1, 1, 1)]
    # feedback for a trace that never comes waits, and is the user's (erasable) row
    await project(nc, pool, late, [feedback(late, "u1", "never", 0.5)], scoped)
    rows = await snapshot(pool, TracesProjection(), late)
    assert [(r["trace_id"], r["score"]) for r in rows[store.PENDING_FEEDBACK]] == [
        ("never", 0.5)]


async def test_tool_names_from_input_or_metadata(nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    await project(nc, pool, tenant, [
        trace(tenant, "u1", "t1", steps=[
            step("generate", input={"model": "qwen3:8b"},
                 output={"prompt_tokens": 10, "completion_tokens": 30}),
            step(input={"tool": "search"}, output={"success": True}, duration=1.0),
            step(metadata={"tool_name": "calc"}, output={"success": False}, duration=3.0),
            step(input={"tool": "search"}, output={"success": True}, duration=2.0)]),
        trace(tenant, "u1", "t2", steps=[step(input="plain text")])])

    tools = {t["tool_name"]: t for t in await read(pool, store.tool_stats, tenant)}
    assert set(tools) == {"search", "calc"}
    assert (tools["search"]["call_count"], tools["search"]["traces"],
            tools["search"]["success_rate"], tools["search"]["avg_latency"]) == (2, 1, 1.0, 1.5)
    assert (tools["calc"]["call_count"], tools["calc"]["success_rate"]) == (1, 0.0)
    assert await read(pool, store.tool_stats, tenant, TIME) == await read(
        pool, store.tool_stats, tenant)
    got = await read(pool, store.get_trace, tenant, "t1", "u1")
    assert [s["tool_name"] for s in got["steps"]] == [None, "search", "calc", "search"]
    assert got["steps"][1]["input"] == {"tool": "search"}
    assert (got["tool_calls"], got["step_count"]) == (3, 4)
    assert (got["prompt_tokens"], got["completion_tokens"]) == (10, 30)
    assert got["reward"] is not None
    plain = await read(pool, store.get_trace, tenant, "t2")
    assert (plain["tool_calls"], plain["prompt_tokens"]) == (0, None)
    summary = await read(pool, store.summary, tenant)
    assert summary["step_types"]["tool_call"]["count"] == 4
    assert summary["step_types"]["tool_call"]["max_duration"] == 3.0
    assert summary["step_types"]["generate"]["avg_completion_tokens"] == 30
    assert await read(pool, store.get_trace, tenant, "missing") is None


async def test_full_text_search(nc: Any, pool: Any, migrated: None) -> None:
    tenant, other = unique("tr"), unique("tr")
    await project(nc, pool, tenant, [
        trace(tenant, "u1", "p", query="How does photosynthesis work in plants?",
              result="Chlorophyll absorbs light."),
        trace(tenant, "u2", "r", query="Tell me about the Roman empire",
              result="It fell in 476.")])
    await project(nc, pool, other, [trace(other, "u1", "o", query="plants and chlorophyll")])

    assert [t["trace_id"] for t in await read(pool, store.search, tenant, "chlorophyll")] == ["p"]
    assert [t["trace_id"] for t in await read(pool, store.search, tenant, "plants")] == ["p"]
    assert [t["trace_id"] for t in await read(pool, store.search, tenant, "roman empire")] == [
        "r"]
    assert await read(pool, store.search, tenant, "roman", user_id="u1") == []
    assert await read(pool, store.search, tenant, "volcano") == []


async def test_list_filters_and_export_pages(nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    events = [trace(tenant, f"u{i % 2}", f"t{i}", model="m" + str(i % 3),
                    outcome="success" if i % 2 else "failure", started_at=T0 + i,
                    steps=[step(input={"tool": "x"})]) for i in range(10)]
    await project(nc, pool, tenant, events)

    seen, cursor = [], None
    while True:
        page, cursor = await read(pool, store.list_traces, tenant, store.ALL, 3, cursor)
        seen += [t["trace_id"] for t in page]
        if cursor is None:
            break
    assert seen == [f"t{i}" for i in range(9, -1, -1)]
    window = store.TraceFilters(model="m0", since=T0 + 3, until=T0 + 9)
    page, cursor = await read(pool, store.list_traces, tenant, window)
    assert ([t["trace_id"] for t in page], cursor) == (["t6", "t3"], None)
    page, _ = await read(pool, store.list_traces, tenant, store.TraceFilters(outcome="success",
                                                                            agent="helper"))
    assert [t["trace_id"] for t in page] == ["t9", "t7", "t5", "t3", "t1"]
    exported, cursor = await read(pool, store.export_page, tenant, store.ALL, None, 4)
    assert [t["trace_id"] for t in exported] == ["t9", "t8", "t7", "t6"]
    assert all(len(t["steps"]) == 1 for t in exported)
    rest, end = await read(pool, store.export_page, tenant, store.ALL, cursor, 100)
    assert len(rest) == 6 and end is None
    with pytest.raises(ValueError):
        await read(pool, store.list_traces, tenant, store.ALL, 3, "not-a-cursor")


def recompute(events: Sequence[Event[Any]]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Per (model, agent): the analyzer's figures, from the events by the documented rules."""
    traces: dict[str, dict[str, Any]] = {}
    pending: dict[str, tuple[float, str | None]] = {}
    for e in events:
        p = e.payload
        key = f"{e.user_id}/{p.trace_id}"
        if isinstance(p, TraceCompleted):
            if key in traces:
                continue
            row = {"model": p.model, "agent": p.agent, "outcome": p.outcome,
                   "feedback": p.feedback, "latency": p.total_latency_seconds,
                   "tokens": p.total_tokens}
            if key in pending:
                score, outcome = pending.pop(key)
                row["feedback"], row["outcome"] = score, outcome or row["outcome"]
            traces[key] = row
        elif key in traces:
            traces[key]["feedback"] = p.score
            traces[key]["outcome"] = p.outcome or traces[key]["outcome"]
        else:
            old = pending.get(key)
            pending[key] = (p.score, p.outcome or (old[1] if old else None))
    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in traces.values():
        acc = out.setdefault((row["model"], row["agent"]),
                             {"count": 0, "s": 0, "k": 0, "f": [], "lat": 0.0, "tok": 0})
        acc["count"] += 1
        acc["s"] += row["outcome"] == "success"
        acc["k"] += row["outcome"] in ("success", "failure", "partial")
        if row["feedback"] is not None:
            acc["f"].append(row["feedback"])
        acc["lat"] += row["latency"]
        acc["tok"] += row["tokens"]
    return {k: {"count": a["count"], "success_rate": a["s"] / a["k"] if a["k"] else 0.0,
                "avg_feedback": sum(a["f"]) / len(a["f"]) if a["f"] else None,
                "avg_latency": a["lat"] / a["count"], "avg_tokens": a["tok"] / a["count"]}
            for k, a in out.items()}


def generated(tenant: str, seed: int = 7) -> list[Event[Any]]:
    rng = random.Random(seed)
    queries = ["def f(): pass", "solve the integral of x", "hi", "x" * 600,
               "Tell me about the history of the Roman empire and its fall"]
    events: list[Event[Any]] = []
    for i in range(60):
        user = f"u{rng.randrange(3)}"
        trace_id = f"t{rng.randrange(45)}"  # some ids repeat: re-sent traces are duplicates
        if rng.random() < 0.3:
            events.append(feedback(tenant, user, trace_id, round(rng.random(), 3),
                                   rng.choice([None, "success", "failure"])))
            continue
        events.append(trace(
            tenant, user, trace_id, model=rng.choice(["a", "b", "c"]),
            agent=rng.choice(["x", "y"]), query=rng.choice(queries),
            outcome=rng.choice([None, "success", "failure", "partial", "unknown"]),
            feedback=rng.choice([None, round(rng.random(), 3)]),
            latency=round(rng.random() * 10, 3), tokens=rng.randrange(1000),
            cost=rng.choice([None, 0.001 * rng.randrange(10)]), started_at=T0 + i,
            steps=[step(input={"tool": rng.choice(["s", "c"])}, output={"success": True},
                        duration=0.1 * rng.randrange(1, 9))
                   for _ in range(rng.randrange(4))]))
    return events


async def test_aggregates_equal_a_recomputation_and_replay_rebuilds_them(
        nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    events = generated(tenant)
    scoped = await project(nc, pool, tenant, events, batch_size=3)
    incremental = await snapshot(pool, scoped.projection, tenant)

    expected = recompute(events)
    routes = {(r["model"], r["agent"]): r for r in await read(pool, store.route_stats, tenant)}
    assert set(routes) == set(expected)
    for key, want in expected.items():
        assert close({k: routes[key][k] for k in want}, want), key
    # aggregates == the same figures computed from the stored traces
    assert close(await read(pool, store.route_stats, tenant, TIME), list(routes.values()))
    assert close(await read(pool, store.tool_stats, tenant, TIME),
                 await read(pool, store.tool_stats, tenant))
    agg = await read(pool, store.summary, tenant)
    assert close(agg, await read(pool, store.summary, tenant, TIME))
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"""SELECT query_class, model, count(*), count(*) FILTER (WHERE outcome = 'success'),
                       count(reward), sum(reward) FROM {store.TRACES} WHERE tenant_id = %s
                GROUP BY 1, 2 ORDER BY 1, 2""", (tenant,))
        by_class = await cur.fetchall()
    classes = await read(pool, store.class_stats, tenant)
    assert [(c["query_class"], c["model"], c["count"], c["successes"], c["reward_count"])
            for c in classes] == [tuple(r[:5]) for r in by_class]
    assert [c["avg_reward"] for c in classes] == pytest.approx([r[5] / r[4] for r in by_class])

    # replay: emptied, checkpoint reset, rebuilt in one large batch -> identical rows
    await erase_tenant(pool, scoped.projection, tenant, ["u0", "u1", "u2"])
    assert all(not rows for rows in (await snapshot(pool, scoped.projection, tenant)).values())
    await reset_for_replay(pool, scoped)
    await scoped.run(nc, pool, batch_size=500)
    assert await snapshot(pool, scoped.projection, tenant) == incremental


async def test_erase_user_drops_only_their_rows_and_share(
        nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    tool = [step(input={"tool": "search"}, output={"success": True})]
    scoped = await project(nc, pool, tenant, [
        trace(tenant, "u1", "a", outcome="success", feedback=0.2, steps=tool),
        trace(tenant, "u2", "b", outcome="failure", feedback=0.6, steps=tool),
        feedback(tenant, "u1", "later", 0.9)])
    projection = scoped.projection
    before_u2 = await snapshot(pool, projection, tenant, "u2")

    await erase_tenant(pool, projection, tenant, ["u1"])
    assert all(not rows for rows in (await snapshot(pool, projection, tenant, "u1")).values())
    assert await snapshot(pool, projection, tenant, "u2") == before_u2
    routes = await read(pool, store.route_stats, tenant)
    assert [(r["count"], r["success_rate"], r["avg_feedback"]) for r in routes] == [
        (1, 0.0, pytest.approx(0.6))]
    tools = await read(pool, store.tool_stats, tenant)
    assert [(t["tool_name"], t["call_count"]) for t in tools] == [("search", 1)]
    assert (await read(pool, store.summary, tenant))["traces"] == 1
