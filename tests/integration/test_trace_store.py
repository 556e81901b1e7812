"""The trace store on real servers: `TracesProjection` run by a real ProjectionRunner (scoped to
the test's tenant), read back through `services.trace_router.store`.

The service is not an installed entry point yet, so its migrations folder is applied directly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from alembic import command

from habitus.crypto.columns import COLUMNS, is_sealed
from habitus.crypto.keyring import Keyring
from habitus.db.migrate import alembic_config
from habitus.db.urls import conninfo
from habitus.events import CATALOG, Event
from habitus.events.ingest import FeedbackGiven, TraceCompleted, TraceStep
from services.trace_router import facts, store
from services.trace_router.projection import TracesProjection
from services.trace_router.search import indexed
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


# --------------------------------------------------------------------------- sealed text

SECRET_QUERY = "Summarise Project Nightingale for Zoe Quantum-Fairweather"
SECRET_RESULT = "Nightingale summary sent to zoe.quantum@example.org."
SECRETS = ["Nightingale", "nightingale", "Quantum", "quantum", "Fairweather", "fairweather",
           "zoe.quantum@example.org", "summary"]


def keyring() -> Keyring:
    if COLUMNS.keyring is None:
        pytest.skip("event encryption is off (HABITUS_ENCRYPT_EVENTS=false): nothing is sealed")
    return COLUMNS.keyring


async def raw(pool: Any, sql_text: str, *params: Any) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql_text, params)
        return await cur.fetchall()


async def test_a_persons_text_is_sealed_on_disk_and_read_back_in_the_clear(
        nc: Any, pool: Any, migrated: None) -> None:
    keyring()
    tenant = unique("tr")
    await project(nc, pool, tenant, [trace(
        tenant, "zoe", "t1", query=SECRET_QUERY, result=SECRET_RESULT, outcome="success",
        feedback=0.9, steps=[
            step("generate", input={"prompt": "Draft the Nightingale brief"},
                 output={"text": "Quantum-Fairweather owns it", "prompt_tokens": 12,
                         "completion_tokens": 7, "success": True},
                 metadata={"note": "zoe.quantum@example.org", "energy_joules": 2.5}),
            step(input={"tool": "send_email"}, output={"success": False}, duration=2.0)])])

    # what Postgres holds: no word of hers, every text value sealed
    rows = await raw(pool, f"SELECT query, result FROM {store.TRACES} WHERE tenant_id = %s",
                     tenant)
    steps = await raw(pool, f"""SELECT input, output, metadata, prompt_tokens,
                                       completion_tokens, energy_joules, succeeded, tool_name
                                FROM {store.STEPS} WHERE tenant_id = %s ORDER BY ordinal""",
                      tenant)
    terms = await raw(pool, f"SELECT term FROM {store.SEARCH_TERMS} WHERE tenant_id = %s",
                      tenant)
    stored = [v for r in rows for v in r] + [v for s in steps for v in s[:3]] + [
        t[0] for t in terms]
    assert len(terms) == len(indexed(f"{SECRET_QUERY} {SECRET_RESULT}"))
    assert {} in stored  # an empty object holds no text, and is kept as it is
    for value in (v for v in stored if v != {}):
        assert isinstance(value, str) and is_sealed(value), value
        assert not any(secret in value for secret in SECRETS)
    # the figures SQL still reads of a step, kept beside its sealed JSON
    assert [s[3:] for s in steps] == [(12, 7, 2.5, True, None), (0, 0, 0.0, False, "send_email")]

    # what the service answers: her text
    got = await read(pool, store.get_trace, tenant, "t1", "zoe")
    assert (got["query"], got["result"]) == (SECRET_QUERY, SECRET_RESULT)
    assert got["steps"][0]["input"] == {"prompt": "Draft the Nightingale brief"}
    assert got["steps"][0]["output"]["text"] == "Quantum-Fairweather owns it"
    assert got["steps"][0]["metadata"] == {"note": "zoe.quantum@example.org",
                                           "energy_joules": 2.5}
    assert got["steps"][1]["input"] == {"tool": "send_email"}
    for text in ("nightingale", '"Quantum-Fairweather"', "zoe quantum example org"):
        hits = await read(pool, store.search, tenant, text)
        assert [(h["trace_id"], h["query"]) for h in hits] == [("t1", SECRET_QUERY)], text
    assert [h["trace_id"] for h in await read(pool, store.search, tenant, "nightingale",
                                              user_id="zoe")] == ["t1"]
    listed, _ = await read(pool, store.list_traces, tenant)
    assert [r["result"] for r in listed] == [SECRET_RESULT]
    exported, _ = await read(pool, store.export_page, tenant)
    assert exported[0]["steps"][0]["output"]["prompt_tokens"] == 12
    assert await read(pool, store.results, tenant, "zoe", ["t1"]) == {"t1": SECRET_RESULT}
    assert [f.query for f in await read(pool, facts.recent, tenant)] == [SECRET_QUERY]
    assert [f.query for f in await read(pool, facts.recent, tenant, queries=False)] == [""]
    # the figures a filter reads from the traces equal the aggregates
    summary = await read(pool, store.summary, tenant, TIME)
    assert close(summary, await read(pool, store.summary, tenant))
    assert summary["step_types"]["generate"]["avg_prompt_tokens"] == 12
    assert summary["energy_joules"] == 2.5
    assert close(await read(pool, store.tool_stats, tenant, TIME),
                 await read(pool, store.tool_stats, tenant))


async def test_search_syntax_over_sealed_traces(nc: Any, pool: Any, migrated: None) -> None:
    tenant = unique("tr")
    await project(nc, pool, tenant, [
        trace(tenant, "u1", "limit", query="Why do I hit the rate limit?",
              result="Too many requests: the rate limit is 10 per second."),
        trace(tenant, "u1", "rates", query="Compare exchange rates", result="Rates rose."),
        trace(tenant, "u2", "outage", query="Is the status page down?",
              result="A rate limit outage, see the status page."),
        trace(tenant, "u2", "retry", query="Retry after a limit", result="Wait, then retry."),
        trace(tenant, "_tenant", "shared", query="rate limit defaults", result="10/s")])

    async def found(text: str, user: str | None = None) -> list[str]:
        return [h["trace_id"] for h in await read(pool, store.search, tenant, text,
                                                  user_id=user)]

    # every word, any user's (the tenant's own traces too), best match first
    assert await found("rate limit") == ["limit", "shared", "outage"]
    assert await found("rate limit", "u2") == ["outage"]
    assert await found('"rate limit is"') == ["limit"]
    assert await found('"limit rate"') == []
    assert await found("rate-limit -outage") == ["limit", "shared"]
    assert await found('limit -"status page" -defaults') == ["limit", "retry"]
    assert await found("exchange or retry") == ["retry", "rates"]
    assert await found("RATES") == ["rates"]  # a word, not its stem: "rate" is not "rates"
    assert await found("-rate") == []  # an exclusion alone finds nothing
    assert await found("volcano") == []
    assert await read(pool, store.search, unique("nobody"), "rate") == []
    hits = await read(pool, store.search, tenant, "rate limit")
    assert hits[0]["rank"] > hits[-1]["rank"] > 0
    assert await read(pool, store.search, tenant, "limit", limit=2) == (
        await read(pool, store.search, tenant, "limit"))[:2]


async def test_a_destroyed_key_hides_the_users_rows_and_erasure_drops_their_terms(
        nc: Any, pool: Any, migrated: None) -> None:
    ring = keyring()
    tenant = unique("tr")
    gone, kept = unique("gone"), unique("kept")
    tool = [step(input={"tool": "search"}, output={"success": True})]
    scoped = await project(nc, pool, tenant, [
        trace(tenant, gone, "a", query="shared words here", outcome="success", feedback=0.9,
              steps=tool),
        trace(tenant, kept, "b", query="shared words there", outcome="success", feedback=0.9,
              steps=tool)])
    assert await read(pool, facts.recent, tenant) and len(
        await read(pool, store.search, tenant, "shared")) == 2

    ring.destroy(tenant, gone)  # the erasure's first step; its rows are deleted next
    assert [h["user_id"] for h in await read(pool, store.search, tenant, "shared")] == [kept]
    assert ring.store.load(tenant, gone) is None  # searching made no key for her again
    assert [r["user_id"] for r in (await read(pool, store.list_traces, tenant))[0]] == [kept]
    assert [r["user_id"] for r in (await read(pool, store.export_page, tenant))[0]] == [kept]
    assert await read(pool, store.get_trace, tenant, "a", gone) is None
    assert await read(pool, store.results, tenant, gone, ["a"]) == {}
    assert [f.trace_id for f in await read(pool, facts.recent, tenant)] == ["b"]

    await erase_tenant(pool, scoped.projection, tenant, [gone])
    assert await raw(pool, f"SELECT user_id FROM {store.SEARCH_TERMS} WHERE tenant_id = %s "
                     "AND user_id = %s", tenant, gone) == []
    assert await raw(pool, f"SELECT count(*) FROM {store.SEARCH_TERMS} WHERE tenant_id = %s",
                     tenant) == [(len(indexed("shared words there Sunny.")),)]


async def test_traces_stored_before_sealing_are_found_after_the_migration(
        fresh_database: str) -> None:
    """The revision that drops the tsvector keeps the older traces searchable (their lexemes
    become plain terms) and their steps' figures readable (columns filled from the JSON)."""
    config = alembic_config(fresh_database, "traces", MIGRATIONS)
    command.upgrade(config, "0006")
    with psycopg.connect(conninfo(fresh_database)) as conn:
        conn.execute(
            f"""INSERT INTO {store.TRACES} (tenant_id, user_id, trace_id, seq, query, agent,
                  model, engine, result, outcome, feedback, started_at, ended_at, total_tokens,
                  prompt_tokens, completion_tokens, total_latency_seconds, cost_usd,
                  query_class, tool_calls, step_count, reward)
                VALUES ('t', 'u1', 'old', 1, 'How does photosynthesis work?', 'a', 'm', 'e',
                  'Chlorophyll absorbs light; see botany.notes@example.org.', 'success', NULL,
                  1, 2, 10, 5, 3, 1, NULL,
                  'short', 1, 2, NULL)""")
        conn.execute(
            f"""INSERT INTO {store.STEPS} (tenant_id, user_id, trace_id, ordinal, step_type,
                  timestamp, duration_seconds, input, output, metadata, tool_name)
                VALUES ('t', 'u1', 'old', 0, 'llm', 1, 1,
                        '{{"prompt": "x"}}', '{{"prompt_tokens": 5.7, "completion_tokens": 3}}',
                        '{{"energy_joules": 1.5}}', NULL),
                       ('t', 'u1', 'old', 1, 'tool', 1, 1, '{{"tool": "search"}}',
                        '{{"success": true}}', '{{}}', 'search')""")
        conn.execute(f"""INSERT INTO {store.ROUTE_STATS} VALUES
                         ('t', 'u1', 'm', 'a', 1, 1, 1, 0, 0, 1, 10, 0, 2, 1)""")
    command.upgrade(config, "head")

    async with await psycopg.AsyncConnection.connect(conninfo(fresh_database)) as conn:
        cur = conn.cursor()
        assert [h["trace_id"] for h in await store.search(cur, "t", "photosynthesis")] == [
            "old"]
        assert [h["trace_id"] for h in await store.search(
            cur, "t", '"chlorophyll absorbs" -dark', user_id="u1")] == ["old"]
        # an address is split as the service splits it: any part of it finds the trace
        for part in ("botany", "notes", '"botany.notes@example.org"'):
            assert [h["trace_id"] for h in await store.search(cur, "t", part)] == ["old"], part
        got = await store.get_trace(cur, "t", "old")
        assert got is not None
        assert got["result"] == "Chlorophyll absorbs light; see botany.notes@example.org."
        assert got["steps"][0]["input"] == {"prompt": "x"}
        summary = await store.summary(cur, "t", TIME)
        assert summary["step_types"]["llm"]["avg_prompt_tokens"] == 5  # as the fold counts
        assert summary["step_types"]["llm"]["avg_completion_tokens"] == 3
        assert summary["energy_joules"] == 1.5
        tools = await store.tool_stats(cur, "t", TIME)
        assert [(t["tool_name"], t["successes"]) for t in tools] == [("search", 1)]
