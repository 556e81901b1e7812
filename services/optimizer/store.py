"""The `optimize` schema's statements: the evaluation log, runs, trials, configurations.

The log is three tables joined only when a run reads it: `outcomes` (one row per trace,
folded from `TraceCompleted`), `feedback` (the latest score per trace, whichever arrived first)
and `decisions` (one row per `RouteDecided`). Joining at read time keeps every fold independent
of the order the two streams deliver in, and lets a decision recorded under the tenant join a
trace recorded under its user.

A trace's query is what a person asked, so `outcomes.query` holds it sealed with the user's
column key (habitus.crypto.columns): erasure destroys the key, and with it every copy in the
heap, the WAL and the backups. Everything else the log keeps is numbers, classes and model
names. Sealing is deterministic per user, so SQL still tells one user's queries apart, but
no longer two users' or their text: a replay's distinct queries are picked after opening.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from habitus.crypto import Shredded
from habitus.crypto.columns import COLUMNS
from habitus.ids import TENANT_WIDE
from habitus.routing.policies import Aggregate
from habitus.routing.reward import reward
from services.optimizer.counterfactual import Sample

SCHEMA = "optimize"
OUTCOMES = f"{SCHEMA}.outcomes"
FEEDBACK = f"{SCHEMA}.feedback"
DECISIONS = f"{SCHEMA}.decisions"
RUNS = f"{SCHEMA}.runs"
TRIALS = f"{SCHEMA}.trials"
CONFIGURATIONS = f"{SCHEMA}.configurations"
DEFAULTS = f"{SCHEMA}.defaults"
LOG_TABLES = (OUTCOMES, FEEDBACK, DECISIONS)
STATE_TABLES = (DECISIONS, RUNS, TRIALS, CONFIGURATIONS, DEFAULTS)


# ------------------------------------------------------------------------ the log

@dataclass(frozen=True, slots=True)
class OutcomeRow:
    tenant_id: str
    user_id: str
    trace_id: str
    decision_id: str | None
    seq: int
    query: str
    query_class: str
    has_code: bool
    has_math: bool
    has_reasoning: bool
    query_length: int
    model: str
    outcome: str | None
    feedback: float | None
    latency_seconds: float
    cost_usd: float | None
    tokens: int
    prompt_tokens: int | None
    completion_tokens: int | None
    energy_joules: float | None
    started_at: float


_OUTCOME_COLUMNS = ("tenant_id", "user_id", "trace_id", "decision_id", "seq", "query",
                    "query_class", "has_code", "has_math", "has_reasoning", "query_length",
                    "model", "outcome", "feedback", "latency_seconds", "cost_usd", "tokens",
                    "prompt_tokens", "completion_tokens", "energy_joules", "started_at")


def _outcome_params(row: OutcomeRow) -> tuple[Any, ...]:
    """The row's values in `_OUTCOME_COLUMNS` order, its query sealed for its user."""
    sealed = COLUMNS.seal(row.tenant_id, row.user_id, row.query)
    return tuple(sealed if c == "query" else getattr(row, c) for c in _OUTCOME_COLUMNS)


async def insert_outcomes(cur: AsyncCursor[Any], rows: Sequence[OutcomeRow]) -> None:
    """New traces; a trace already stored keeps its first copy."""
    if not rows:
        return
    columns = ", ".join(_OUTCOME_COLUMNS)
    await cur.executemany(
        f"INSERT INTO {OUTCOMES} ({columns}) VALUES "
        f"({', '.join(['%s'] * len(_OUTCOME_COLUMNS))}) "
        "ON CONFLICT (tenant_id, user_id, trace_id) DO NOTHING",
        [_outcome_params(r) for r in rows])


async def save_feedback(cur: AsyncCursor[Any],
                        given: Sequence[tuple[str, str, str, float, str | None, int]]) -> None:
    """(tenant, user, trace, score, outcome, seq): the latest in stream order wins; an outcome
    given with older feedback is kept when the newer one gives none."""
    if not given:
        return
    await cur.executemany(
        f"""INSERT INTO {FEEDBACK} AS f (tenant_id, user_id, trace_id, score, outcome, seq)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, trace_id) DO UPDATE SET
              score = EXCLUDED.score, outcome = coalesce(EXCLUDED.outcome, f.outcome),
              seq = EXCLUDED.seq
            WHERE f.seq < EXCLUDED.seq""", list(given))


async def save_decisions(cur: AsyncCursor[Any], rows: Sequence[tuple[Any, ...]]) -> None:
    """(tenant, decision, user, model, policy, class, propensity, offered, urgency, default,
    fallback, configuration, at); a decision id seen before keeps its first record."""
    if not rows:
        return
    await cur.executemany(
        f"""INSERT INTO {DECISIONS} (tenant_id, decision_id, user_id, model, policy,
                query_class, propensity, offered, urgency, default_model, fallback_model,
                configuration, decided_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, decision_id, user_id) DO NOTHING""", list(rows))


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What a run reads of the log, once: the joined samples, the tenant's per (class, model)
    aggregates over every trace and the (class, model, reward) records in order."""

    samples: list[Sample]
    aggregates: dict[tuple[str, str], Aggregate]
    records: list[tuple[str, str, float]]
    traces: int
    unjoined: int
    #: (class, model, outcome, feedback) of every trace in order (the online switch's input)
    observations: list[tuple[str, str, str | None, float | None]]


async def load_log(cur: AsyncCursor[Any], tenant_id: str, since: float | None,
                   until: float | None) -> LoadedLog:
    """The tenant's traces in the window with their feedback and decisions (one query)."""
    where = ["o.tenant_id = %s"]
    params: list[Any] = [tenant_id]
    if since is not None:
        where.append("o.started_at >= %s")
        params.append(since)
    if until is not None:
        where.append("o.started_at < %s")
        params.append(until)
    await cur.execute(
        f"""SELECT o.query_class, o.has_code, o.has_math, o.has_reasoning, o.query_length,
                   o.model, coalesce(f.outcome, o.outcome), coalesce(f.score, o.feedback),
                   o.latency_seconds, o.cost_usd, o.tokens, o.prompt_tokens,
                   o.completion_tokens, o.energy_joules,
                   d.propensity, d.offered, d.urgency, d.default_model, d.fallback_model,
                   d.model, d.query_class
            FROM {OUTCOMES} o
            LEFT JOIN {FEEDBACK} f ON f.tenant_id = o.tenant_id AND f.user_id = o.user_id
              AND f.trace_id = o.trace_id
            LEFT JOIN LATERAL (
              SELECT * FROM {DECISIONS} d WHERE d.tenant_id = o.tenant_id
                AND d.decision_id = o.decision_id AND d.user_id IN (o.user_id, %s)
              ORDER BY d.user_id = o.user_id DESC LIMIT 1) d ON true
            WHERE {" AND ".join(where)}
            ORDER BY o.started_at, o.seq""", [TENANT_WIDE, *params])
    samples: list[Sample] = []
    aggregates: dict[tuple[str, str], Aggregate] = {}
    records: list[tuple[str, str, float]] = []
    observations: list[tuple[str, str, str | None, float | None]] = []
    traces = unjoined = 0
    for r in await cur.fetchall():
        traces += 1
        (klass, has_code, has_math, has_reasoning, length, model, outcome, feedback, latency,
         cost, tokens, prompt, completion, energy, propensity, offered, urgency, default,
         fallback, decided, decided_class) = r
        value = reward(latency_seconds=latency, cost_usd=cost, prompt_tokens=prompt,
                       completion_tokens=completion, feedback=feedback, outcome=outcome)
        key = (klass, model)
        aggregates[key] = aggregates.get(key, Aggregate()).plus(
            Aggregate.of(outcome, feedback, value))
        if value is not None:
            records.append((klass, model, value))
        observations.append((klass, model, outcome, feedback))
        # a trace whose model is not the one decided was not routed by the decision
        if propensity is None or decided != model or not offered:
            unjoined += 1
            continue
        samples.append(Sample(
            query_class=decided_class or klass, has_code=has_code, has_math=has_math,
            has_reasoning=has_reasoning, query_length=length,
            urgency=0.5 if urgency is None else urgency, offered=tuple(offered),
            default_model=default, fallback_model=fallback, model=model,
            propensity=propensity, outcome=outcome, feedback=feedback, reward=value,
            latency_seconds=latency, cost_usd=cost, tokens=float(tokens),
            energy_joules=energy))
    return LoadedLog(samples, aggregates, records, traces, unjoined, observations)


def distinct_queries(tenant_id: str, rows: Sequence[Sequence[Any]], limit: int
                     ) -> list[tuple[str, str, str | None]]:
    """(query, class, outcome) of the first `limit` distinct texts among `rows` (user, sealed
    query, class, outcome; newest first), opened. A user whose keys were destroyed (erased
    while the run reads) is passed over, not a failure of the tenant's replay."""
    out: dict[str, tuple[str, str, str | None]] = {}
    erased: set[str] = set()
    for user_id, query, klass, outcome in rows:
        if len(out) >= limit:
            break
        if user_id in erased:
            continue
        try:
            text = COLUMNS.open(tenant_id, user_id, query)
        except Shredded:
            erased.add(user_id)
            continue
        out.setdefault(text, (text, klass, outcome))
    return list(out.values())


async def recent_queries(cur: AsyncCursor[Any], tenant_id: str, limit: int,
                         since: float | None, until: float | None
                         ) -> list[tuple[str, str, str | None]]:
    """(query, query class, outcome) of the tenant's latest traces in the window, for a
    replay: distinct queries, newest first.

    SQL keeps each user's latest trace of each (sealed) query; two users asking the same
    are told apart only once opened, so a page of `limit` rows may hold fewer distinct texts:
    the page then grows (fourfold) until it holds enough or the window is read whole."""
    if limit <= 0:
        return []
    where = ["tenant_id = %s"]
    params: list[Any] = [tenant_id]
    if since is not None:
        where.append("started_at >= %s")
        params.append(since)
    if until is not None:
        where.append("started_at < %s")
        params.append(until)
    page = limit
    while True:
        await cur.execute(
            f"""SELECT user_id, query, query_class, outcome FROM (
                  SELECT DISTINCT ON (user_id, query) user_id, query, query_class, outcome,
                         started_at, seq
                  FROM {OUTCOMES} WHERE {" AND ".join(where)}
                  ORDER BY user_id, query, started_at DESC, seq DESC) q
                ORDER BY started_at DESC, seq DESC, user_id LIMIT %s""", [*params, page])
        rows = await cur.fetchall()
        found = distinct_queries(tenant_id, rows, limit)
        if len(found) >= limit or len(rows) < page:
            return found
        page *= 4


async def offered_models(cur: AsyncCursor[Any], tenant_id: str) -> list[str]:
    """Every model the tenant's recorded traces used, by name."""
    await cur.execute(f"SELECT DISTINCT model FROM {OUTCOMES} WHERE tenant_id = %s "
                      "ORDER BY model", (tenant_id,))
    return [r[0] for r in await cur.fetchall() if r[0]]


# ------------------------------------------------------------------------ runs

async def start_run(cur: AsyncCursor[Any], tenant_id: str, user_id: str, run_id: str,
                    definition: dict[str, Any], at: float) -> None:
    await cur.execute(
        f"""INSERT INTO {RUNS} (tenant_id, user_id, run_id, definition, status, started_at)
            VALUES (%s, %s, %s, %s, 'running', %s)
            ON CONFLICT (tenant_id, user_id, run_id) DO NOTHING""",
        (tenant_id, user_id, run_id, Jsonb(definition), at))


async def add_trial(cur: AsyncCursor[Any], tenant_id: str, user_id: str, p: Any, at: float
                    ) -> None:
    """A `TrialEvaluated`: the trial, and the run's count, frontier and best after it."""
    await cur.execute(
        f"""INSERT INTO {TRIALS} (tenant_id, user_id, run_id, idx, trial_id, params, proposer,
                reasoning, parse_failure, metrics, intervals, support, refused, evaluated_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, run_id, idx) DO NOTHING""",
        (tenant_id, user_id, p.run_id, p.index, p.trial_id, Jsonb(p.params), p.proposer,
         p.reasoning, p.parse_failure, Jsonb(p.metrics), Jsonb(p.intervals), p.support,
         p.refused, at))
    await cur.execute(
        f"""UPDATE {RUNS} SET trials = greatest(trials, %s), frontier = %s, best_trial_id = %s
            WHERE tenant_id = %s AND user_id = %s AND run_id = %s AND trials < %s""",
        (p.index + 1, Jsonb(p.frontier), p.best_trial_id, tenant_id, user_id, p.run_id,
         p.index + 1))


async def end_run(cur: AsyncCursor[Any], tenant_id: str, user_id: str, run_id: str,
                  status: str, at: float,
                  *, reason: str | None = None, stopped_early: bool = False,
                  best_trial_id: str | None = None, frontier: list[str] | None = None
                  ) -> None:
    """The run's end; a run that already ended keeps its first end."""
    await cur.execute(
        f"""UPDATE {RUNS} SET status = %s, ended_at = %s, reason = %s, stopped_early = %s,
              best_trial_id = coalesce(%s, best_trial_id),
              frontier = coalesce(%s, frontier)
            WHERE tenant_id = %s AND user_id = %s AND run_id = %s AND status = 'running'""",
        (status, at, reason, stopped_early, best_trial_id,
         None if frontier is None else Jsonb(frontier), tenant_id, user_id, run_id))


_RUN_COLUMNS = ("run_id, definition, status, trials, best_trial_id, frontier, stopped_early, "
                "reason, started_at, ended_at")


def _run(r: Sequence[Any]) -> dict[str, Any]:
    keys = [k.strip() for k in _RUN_COLUMNS.split(",")]
    return dict(zip(keys, r, strict=True))


async def get_run(cur: AsyncCursor[Any], tenant_id: str, run_id: str) -> dict[str, Any] | None:
    await cur.execute(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE tenant_id = %s AND "
                      "user_id = %s AND run_id = %s", (tenant_id, TENANT_WIDE, run_id))
    r = await cur.fetchone()
    return None if r is None else _run(r)


async def list_runs(cur: AsyncCursor[Any], tenant_id: str, limit: int) -> list[dict[str, Any]]:
    await cur.execute(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE tenant_id = %s AND "
                      "user_id = %s ORDER BY started_at DESC, run_id DESC LIMIT %s",
                      (tenant_id, TENANT_WIDE, limit))
    return [_run(r) for r in await cur.fetchall()]


async def running(cur: AsyncCursor[Any]) -> list[tuple[str, str]]:
    """(tenant, run) of every run still running, oldest first: what the workers pick up."""
    await cur.execute(f"SELECT tenant_id, run_id FROM {RUNS} WHERE status = 'running' "
                      "AND user_id = %s ORDER BY started_at, tenant_id, run_id", (TENANT_WIDE,))
    return [(r[0], r[1]) for r in await cur.fetchall()]


_TRIAL_COLUMNS = ("idx, trial_id, params, proposer, reasoning, parse_failure, metrics, "
                  "intervals, support, refused")


async def trials(cur: AsyncCursor[Any], tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    await cur.execute(f"SELECT {_TRIAL_COLUMNS} FROM {TRIALS} WHERE tenant_id = %s AND "
                      "user_id = %s AND run_id = %s ORDER BY idx",
                      (tenant_id, TENANT_WIDE, run_id))
    keys = [k.strip() for k in _TRIAL_COLUMNS.split(",")]
    return [dict(zip(keys, r, strict=True)) for r in await cur.fetchall()]


# ------------------------------------------------------------------------ configurations

async def save_configuration(cur: AsyncCursor[Any], tenant_id: str, user_id: str, p: Any,
                             at: float) -> None:
    await cur.execute(
        f"""INSERT INTO {CONFIGURATIONS} (tenant_id, user_id, version, params, previous,
                run_id, trial_id, undoes, applied_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, version) DO NOTHING""",
        (tenant_id, user_id, p.version, Jsonb(p.params), Jsonb(p.previous), p.run_id,
         p.trial_id, p.undoes, at))


_CONFIG_COLUMNS = "version, params, previous, run_id, trial_id, undoes, applied_at"


def _configuration(r: Sequence[Any]) -> dict[str, Any]:
    keys = [k.strip() for k in _CONFIG_COLUMNS.split(",")]
    return dict(zip(keys, r, strict=True))


async def configurations(cur: AsyncCursor[Any], tenant_id: str) -> list[dict[str, Any]]:
    """Every version of the tenant's configuration, oldest first."""
    await cur.execute(f"SELECT {_CONFIG_COLUMNS} FROM {CONFIGURATIONS} WHERE tenant_id = %s "
                      "AND user_id = %s ORDER BY version", (tenant_id, TENANT_WIDE))
    return [_configuration(r) for r in await cur.fetchall()]


async def current_configuration(cur: AsyncCursor[Any], tenant_id: str
                                ) -> dict[str, Any] | None:
    await cur.execute(f"SELECT {_CONFIG_COLUMNS} FROM {CONFIGURATIONS} WHERE tenant_id = %s "
                      "AND user_id = %s ORDER BY version DESC LIMIT 1", (tenant_id, TENANT_WIDE))
    r = await cur.fetchone()
    return None if r is None else _configuration(r)


async def save_default(cur: AsyncCursor[Any], tenant_id: str, user_id: str, policy: str,
                       version: int) -> None:
    await cur.execute(
        f"""INSERT INTO {DEFAULTS} (tenant_id, user_id, policy, version) VALUES (%s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET policy = EXCLUDED.policy,
              version = EXCLUDED.version WHERE {DEFAULTS}.version < EXCLUDED.version""",
        (tenant_id, user_id, policy, version))


async def default_policy(cur: AsyncCursor[Any], tenant_id: str) -> str | None:
    await cur.execute(f"SELECT policy FROM {DEFAULTS} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, TENANT_WIDE))
    r = await cur.fetchone()
    return None if r is None else str(r[0])
