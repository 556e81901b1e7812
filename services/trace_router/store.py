"""The `traces` schema: SQL only.

Writes run in the projection's batch transaction: traces and steps go in with COPY, the
aggregates are bumped by one statement per table per run of events, with per-key deltas summed
first. Every aggregate row belongs to one user, so erasing a user removes exactly their share;
reads sum over the tenant's users. Sums are `numeric` and the deltas are `Decimal`s of the
values' shortest decimal form, so they are exact: a replay in other batch sizes gives the same
rows, bit for bit.

Reads each answer from the aggregates when the filter is by user, model or agent only; an
`outcome` or time-range filter has no aggregate, so those go to the traces (and steps) the
filter selects, by its index.

A person's text is sealed with their key (habitus.crypto.columns) on its way in and opened
on its way out, here: a trace's query and result, a step's input, output and metadata (each
sealed whole), and the words `traces.search` finds traces by (`traces.search_terms`, see
services.trace_router.search). Callers see only plaintext; what SQL still reads of a step (its
token counts, energy, success) is kept in columns of its own. A read over many users skips the
rows of a user whose keys were destroyed (an erasure under way deletes them next).

Long on purpose: every statement on the `traces` schema is here and nowhere else (writes,
aggregates, reads, paging), so the one module that spells its tables is the one to read when
they change.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Context, Decimal
from functools import reduce
from operator import attrgetter
from typing import Any

from psycopg import AsyncCursor
from pydantic_core import to_json

from habitus.crypto.columns import COLUMNS, ESCAPE, PREFIX, ColumnMemo, is_sealed
from habitus.crypto.keyring import KeyMissing, Shredded
from services.trace_router import search as text_search

SCHEMA = "traces"
TRACES = f"{SCHEMA}.traces"
STEPS = f"{SCHEMA}.steps"
PENDING_FEEDBACK = f"{SCHEMA}.pending_feedback"
ROUTE_STATS = f"{SCHEMA}.route_stats"
TOOL_STATS = f"{SCHEMA}.tool_stats"
CLASS_STATS = f"{SCHEMA}.class_stats"
STEP_STATS = f"{SCHEMA}.step_stats"
SEARCH_TERMS = f"{SCHEMA}.search_terms"
TABLES = (TRACES, STEPS, PENDING_FEEDBACK, ROUTE_STATS, TOOL_STATS, CLASS_STATS, STEP_STATS,
          SEARCH_TERMS)

#: outcomes that say how a run went ("unknown" and none do not count for success rates)
KNOWN_OUTCOMES = ("success", "failure", "partial")
TraceKey = tuple[str, str, str]  # tenant, user, trace id

#: wide enough that no sum of these values is ever rounded
_EXACT = Context(prec=200)
#: a square is kept to 28 significant digits (the decimal module's default precision, which
#: every stored sum of squares was taken at), then summed exactly
_SQUARE = Context(prec=28)
_ZERO = Decimal(0)


def exact(value: float | int | None) -> Decimal:
    """A value as the decimal it prints as (0.1 is 0.1), for exact sums."""
    return _ZERO if value is None else Decimal(repr(value))


def exact_square(value: float) -> Decimal:
    d = exact(value)
    return _SQUARE.multiply(d, d)


def exact_sum(values: Iterable[float | int]) -> Decimal:
    """The exact sum of `values` as the decimals they print as (what adding their `exact`
    forms gives, without a Python loop)."""
    return reduce(_EXACT.add, map(Decimal, map(repr, values)), _ZERO)


def exact_sums(values: Iterable[float]) -> tuple[Decimal, Decimal]:
    """The exact sum of `values` and the sum of their `exact_square`s."""
    ds = list(map(Decimal, map(repr, values)))
    return (reduce(_EXACT.add, ds, _ZERO),
            reduce(_EXACT.add, map(_SQUARE.multiply, ds, ds), _ZERO))


# ---------------------------------------------------------------------- rows


@dataclass(slots=True)
class TraceRow:
    """One trace (its query and result in the clear; sealed only as they are written)."""

    tenant_id: str
    user_id: str
    trace_id: str
    seq: int
    query: str
    agent: str
    model: str
    engine: str
    result: str
    outcome: str | None
    feedback: float | None
    started_at: float
    ended_at: float
    total_tokens: int
    prompt_tokens: int | None
    completion_tokens: int | None
    total_latency_seconds: float
    cost_usd: float | None
    query_class: str
    tool_calls: int
    step_count: int
    reward: float | None

    @property
    def key(self) -> TraceKey:
        return (self.tenant_id, self.user_id, self.trace_id)


TRACE_COLUMNS = tuple(f.name for f in fields(TraceRow))
_TRACE_COLS = ", ".join(TRACE_COLUMNS)
_trace_values = attrgetter(*TRACE_COLUMNS)


@dataclass(slots=True)  # not frozen: a frozen dataclass is built six times slower, per step
class StepRow:
    tenant_id: str
    user_id: str
    trace_id: str
    ordinal: int
    step_type: str
    timestamp: float
    duration_seconds: float
    #: JSON text (COPY writes it as is, sealed); None for a JSON null
    input_json: str | None
    output_json: str | None
    metadata_json: str
    tool_name: str | None
    # what the aggregates take from the step; stored too, for the queries the aggregates
    # cannot answer (the JSON they come from is sealed)
    prompt_tokens: int
    completion_tokens: int
    energy_joules: float
    succeeded: bool


_STEP_COLS = ("tenant_id, user_id, trace_id, ordinal, step_type, timestamp, duration_seconds, "
              "input, output, metadata, tool_name, prompt_tokens, completion_tokens, "
              "energy_joules, succeeded")
_STEP_PLAIN = attrgetter("tenant_id", "user_id", "trace_id", "ordinal", "step_type",
                         "timestamp", "duration_seconds")
_STEP_FIGURES = attrgetter("tool_name", "prompt_tokens", "completion_tokens", "energy_joules",
                           "succeeded")


def _row(r: Sequence[Any]) -> TraceRow:
    return TraceRow(*r)


# ---------------------------------------------------------------------- writes


def _rows_json(rows: Iterable[Sequence[Any]]) -> str:
    """Rows as one JSON array of arrays: a Decimal as its exact digits (a string), a float as
    its shortest round-trip form. One serializer call, where psycopg dumps an array parameter
    element by element in Python."""
    return to_json(list(rows)).decode()


def _columns(types: Sequence[str]) -> str:
    """The select list reading the rows of `_rows_json` (`e`), one cast per column."""
    return ", ".join(f"e->>{i}" if t == "text" else f"(e->>{i})::{t}"
                     for i, t in enumerate(types))


#: trace keys as a relation (t, u, id), from three text arrays (`_key_arrays`). Not from one
#: JSON parameter: the planner sizes `jsonb_array_elements` at 100 rows whatever it holds, and
#: so joined the keys to the traces by hashing after a scan of the whole table (3 ms per batch
#: at 2,000 traces, growing with every trace stored); an array's length it knows, or sizes
#: small in a generic plan, and looks each key up in the primary key.
_KEYS = "unnest(%b::text[], %b::text[], %b::text[])"


def _key_arrays(keys: Sequence[TraceKey]) -> tuple[list[str], list[str], list[str]]:
    return [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]


async def existing_traces(cur: AsyncCursor[Any], keys: Iterable[TraceKey]
                          ) -> dict[TraceKey, TraceRow]:
    """The stored traces among `keys`, their query and result as stored (sealed: the fold
    reads only their figures, and writes back none of their text)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    cols = ", ".join(f"t.{c}" for c in TRACE_COLUMNS)
    await cur.execute(
        f"""SELECT {cols} FROM {TRACES} t JOIN {_KEYS} AS k(t, u, id)
              ON t.tenant_id = k.t AND t.user_id = k.u AND t.trace_id = k.id""",
        _key_arrays(wanted))
    return {row.key: row for row in map(_row, await cur.fetchall())}


async def take_pending(cur: AsyncCursor[Any], keys: Iterable[TraceKey]
                       ) -> dict[TraceKey, tuple[float, str | None]]:
    """Remove and return the feedback that was waiting for these traces: (score, outcome)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    await cur.execute(
        f"""DELETE FROM {PENDING_FEEDBACK} p USING {_KEYS} AS k(t, u, id)
            WHERE p.tenant_id = k.t AND p.user_id = k.u AND p.trace_id = k.id
            RETURNING p.tenant_id, p.user_id, p.trace_id, p.score, p.outcome""",
        _key_arrays(wanted))
    return {(r[0], r[1], r[2]): (float(r[3]), r[4]) for r in await cur.fetchall()}


async def keep_pending(cur: AsyncCursor[Any],
                       pending: Mapping[TraceKey, tuple[float, str | None, int]]) -> None:
    """Keep feedback whose trace has not arrived: the latest score, the latest outcome given."""
    if not pending:
        return
    items = sorted(pending.items())
    await cur.execute(
        f"""INSERT INTO {PENDING_FEEDBACK} (tenant_id, user_id, trace_id, score, outcome, seq)
            SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::float8[], %b::text[],
                                 %b::int8[])
            ON CONFLICT (tenant_id, user_id, trace_id) DO UPDATE SET
              score = EXCLUDED.score,
              outcome = COALESCE(EXCLUDED.outcome, {PENDING_FEEDBACK}.outcome),
              seq = EXCLUDED.seq""",
        ([k[0] for k, _ in items], [k[1] for k, _ in items], [k[2] for k, _ in items],
         [v[0] for _, v in items], [v[1] for _, v in items], [v[2] for _, v in items]))


class Sealer:
    """Seals a batch's values for their users, each distinct value once per user."""

    def __init__(self) -> None:
        self._memo = ColumnMemo(COLUMNS)

    def text(self, tenant_id: str, user_id: str, text: str) -> str:
        return self._memo.seal(tenant_id, user_id, text)

    def json(self, tenant_id: str, user_id: str, value: str | None) -> str | None:
        """JSON text for a jsonb column, sealed whole (as a JSON string of the sealed text);
        null and `{}`, which hold no text, as they are. Unsealed (no keyring, the tenant's
        own), a JSON string that would read as sealed or escaped is escaped as `seal_json`
        escapes it."""
        if value is None or value == "{}":
            return value
        sealed = self.text(tenant_id, user_id, value)
        if is_sealed(sealed):
            # the prefix and base64 need no escaping in a JSON string
            return f'"{sealed}"'
        if value.startswith(('"' + PREFIX, '"' + ESCAPE)):
            return json.dumps(COLUMNS.seal_json(tenant_id, user_id, json.loads(value)),
                              ensure_ascii=False)
        return value


_QUERY_AT = TRACE_COLUMNS.index("query")
_RESULT_AT = TRACE_COLUMNS.index("result")


def sealed_trace(row: TraceRow, seal: Sealer) -> list[Any]:
    """The values of `row` as COPY writes them: its query and result sealed."""
    values = list(_trace_values(row))
    values[_QUERY_AT] = seal.text(row.tenant_id, row.user_id, row.query)
    values[_RESULT_AT] = seal.text(row.tenant_id, row.user_id, row.result)
    return values


def sealed_step(s: StepRow, seal: Sealer) -> tuple[Any, ...]:
    return (*_STEP_PLAIN(s), seal.json(s.tenant_id, s.user_id, s.input_json),
            seal.json(s.tenant_id, s.user_id, s.output_json),
            seal.json(s.tenant_id, s.user_id, s.metadata_json), *_STEP_FIGURES(s))


def terms(row: TraceRow, seal: Sealer) -> list[tuple[str, str, str, str]]:
    """The search terms of a trace: each distinct word of its query and result, sealed."""
    t, u = row.tenant_id, row.user_id
    return [(t, u, seal.text(t, u, word), row.trace_id)
            for word in sorted(text_search.indexed(f"{row.query} {row.result}"))]


async def insert_traces(cur: AsyncCursor[Any], rows: Sequence[TraceRow],
                        steps: Sequence[StepRow]) -> None:
    """COPY new traces, their steps and their search terms, sealed (the caller checked the
    traces are not stored yet, so neither are their terms)."""
    seal = Sealer()
    if rows:
        async with cur.copy(f"COPY {TRACES} ({_TRACE_COLS}) FROM STDIN") as copy:
            for row in rows:
                await copy.write_row(sealed_trace(row, seal))
        async with cur.copy(f"COPY {SEARCH_TERMS} (tenant_id, user_id, term, trace_id) "
                            "FROM STDIN") as copy:
            for row in rows:
                for term in terms(row, seal):
                    await copy.write_row(term)
    if steps:
        async with cur.copy(f"COPY {STEPS} ({_STEP_COLS}) FROM STDIN") as copy:
            for s in steps:
                await copy.write_row(sealed_step(s, seal))


async def update_feedback(cur: AsyncCursor[Any], rows: Sequence[TraceRow]) -> None:
    """Store the feedback, outcome and reward of traces feedback was joined to."""
    if not rows:
        return
    await cur.execute(
        f"""UPDATE {TRACES} t SET feedback = k.fb, outcome = k.outcome, reward = k.reward
            FROM unnest(%b::text[], %b::text[], %b::text[], %b::float8[], %b::text[],
                        %b::float8[]) AS k(t, u, id, fb, outcome, reward)
            WHERE t.tenant_id = k.t AND t.user_id = k.u AND t.trace_id = k.id""",
        ([r.tenant_id for r in rows], [r.user_id for r in rows], [r.trace_id for r in rows],
         [r.feedback for r in rows], [r.outcome for r in rows], [r.reward for r in rows]))


# -- aggregates: {key: [delta per value column]}, summed in Python, one statement per table

Deltas = dict[tuple[str, ...], list[Any]]

ROUTE_KEY = ("tenant_id", "user_id", "model", "agent")
ROUTE_VALUES = (("count", "int8"), ("successes", "int8"), ("outcomes_known", "int8"),
                ("feedback_sum", "numeric"), ("feedback_n", "int8"),
                ("latency_sum", "numeric"), ("tokens_sum", "int8"), ("cost_sum", "numeric"),
                ("steps_sum", "int8"), ("tool_calls_sum", "int8"))
CLASS_KEY = ("tenant_id", "user_id", "query_class", "model")
CLASS_VALUES = (("count", "int8"), ("successes", "int8"), ("outcomes_known", "int8"),
                ("feedback_sum", "numeric"), ("feedback_n", "int8"),
                ("reward_sum", "numeric"), ("reward_n", "int8"))
TOOL_KEY = ("tenant_id", "user_id", "tool_name")
TOOL_VALUES = (("calls", "int8"), ("traces", "int8"), ("successes", "int8"),
               ("duration_sum", "numeric"))
STEP_KEY = ("tenant_id", "user_id", "model", "agent", "step_type")
STEP_VALUES = (("count", "int8"), ("duration_sum", "numeric"), ("duration_sq_sum", "numeric"),
               ("prompt_tokens_sum", "int8"), ("completion_tokens_sum", "int8"),
               ("energy_joules_sum", "numeric"))


def add(deltas: Deltas, key: tuple[str, ...], values: Sequence[Any], sign: int = 1) -> None:
    acc = deltas.get(key)
    if acc is None:
        deltas[key] = [sign * v for v in values]
        return
    for i, v in enumerate(values):
        acc[i] = _EXACT.add(acc[i], sign * v) if isinstance(v, Decimal) else acc[i] + sign * v


def route_values(row: TraceRow) -> list[Any]:
    known = row.outcome in KNOWN_OUTCOMES
    return [1, int(row.outcome == "success"), int(known), exact(row.feedback),
            int(row.feedback is not None), exact(row.total_latency_seconds), row.total_tokens,
            exact(row.cost_usd), row.step_count, row.tool_calls]


def class_values(row: TraceRow) -> list[Any]:
    known = row.outcome in KNOWN_OUTCOMES
    return [1, int(row.outcome == "success"), int(known), exact(row.feedback),
            int(row.feedback is not None), exact(row.reward), int(row.reward is not None)]


def _route_sums(rows: Sequence[TraceRow]) -> list[Any]:
    """`route_values` of each row, summed."""
    return [len(rows), sum(r.outcome == "success" for r in rows),
            sum(r.outcome in KNOWN_OUTCOMES for r in rows),
            exact_sum([r.feedback for r in rows if r.feedback is not None]),
            sum(r.feedback is not None for r in rows),
            exact_sum([r.total_latency_seconds for r in rows]),
            sum(r.total_tokens for r in rows),
            exact_sum([r.cost_usd for r in rows if r.cost_usd is not None]),
            sum(r.step_count for r in rows), sum(r.tool_calls for r in rows)]


def _class_sums(rows: Sequence[TraceRow]) -> list[Any]:
    """`class_values` of each row, summed."""
    return [len(rows), sum(r.outcome == "success" for r in rows),
            sum(r.outcome in KNOWN_OUTCOMES for r in rows),
            exact_sum([r.feedback for r in rows if r.feedback is not None]),
            sum(r.feedback is not None for r in rows),
            exact_sum([r.reward for r in rows if r.reward is not None]),
            sum(r.reward is not None for r in rows)]


@dataclass(slots=True)
class NewTraces:
    """What a run of new traces adds to each aggregate table (see `new_traces`)."""

    route: Deltas
    klass: Deltas
    tools: Deltas
    steps: Deltas
    #: per step key, the shortest and the longest step
    extremes: dict[tuple[str, ...], tuple[float, float]]


def new_traces(traces: Iterable[tuple[TraceRow, Sequence[StepRow]]]) -> NewTraces:
    """The aggregates' deltas for traces not stored before: the rows grouped by key, then
    each key's column summed at once (exact sums, as `add` would give one row at a time)."""
    routes: dict[tuple[str, ...], list[TraceRow]] = {}
    classes: dict[tuple[str, ...], list[TraceRow]] = {}
    tool_steps: dict[tuple[str, ...], list[StepRow]] = {}
    tool_traces: dict[tuple[str, ...], int] = {}
    steps: dict[tuple[str, ...], list[StepRow]] = {}
    for row, trace_steps in traces:
        routes.setdefault((row.tenant_id, row.user_id, row.model, row.agent), []).append(row)
        classes.setdefault((row.tenant_id, row.user_id, row.query_class, row.model),
                           []).append(row)
        called: set[tuple[str, ...]] = set()
        for s in trace_steps:
            if s.tool_name is not None:
                tool: tuple[str, ...] = (s.tenant_id, s.user_id, s.tool_name)
                tool_steps.setdefault(tool, []).append(s)
                called.add(tool)
            steps.setdefault((s.tenant_id, s.user_id, row.model, row.agent, s.step_type),
                             []).append(s)
        for tkey in called:  # one more trace that called the tool
            tool_traces[tkey] = tool_traces.get(tkey, 0) + 1
    step_deltas: Deltas = {}
    extremes: dict[tuple[str, ...], tuple[float, float]] = {}
    for key, group in steps.items():
        durations = [s.duration_seconds for s in group]
        total, squares = exact_sums(durations)
        step_deltas[key] = [len(group), total, squares,
                            sum(s.prompt_tokens for s in group),
                            sum(s.completion_tokens for s in group),
                            exact_sum([s.energy_joules for s in group])]
        extremes[key] = (min(durations), max(durations))
    return NewTraces(
        route={k: _route_sums(g) for k, g in routes.items()},
        klass={k: _class_sums(g) for k, g in classes.items()},
        tools={k: [len(g), tool_traces[k], sum(s.succeeded for s in g),
                   exact_sum([s.duration_seconds for s in g])] for k, g in tool_steps.items()},
        steps=step_deltas, extremes=extremes)


def contribute(route: Deltas, klass: Deltas, row: TraceRow, sign: int = 1) -> None:
    """Add (or, with sign -1, take back) a trace's share of the route and class aggregates."""
    add(route, (row.tenant_id, row.user_id, row.model, row.agent), route_values(row), sign)
    add(klass, (row.tenant_id, row.user_id, row.query_class, row.model), class_values(row),
        sign)


async def bump(cur: AsyncCursor[Any], table: str, key: Sequence[str],
               values: Sequence[tuple[str, str]], deltas: Deltas) -> None:
    """Add `deltas` to `table`'s rows, creating missing ones."""
    if not deltas:
        return
    names = [*key, *(v for v, _ in values)]
    types = [*("text" for _ in key), *(t for _, t in values)]
    sets = ", ".join(f"{v} = {table}.{v} + EXCLUDED.{v}" for v, _ in values)
    await cur.execute(
        f"""INSERT INTO {table} ({", ".join(names)})
            SELECT {_columns(types)} FROM jsonb_array_elements(%s::jsonb) AS e
            ON CONFLICT ({", ".join(key)}) DO UPDATE SET {sets}""",
        (_rows_json([*k, *d] for k, d in sorted(deltas.items())),))


async def bump_steps(cur: AsyncCursor[Any], deltas: Deltas,
                     extremes: Mapping[tuple[str, ...], tuple[float, float]]) -> None:
    """The per-step-type aggregates: sums plus the shortest and longest step."""
    if not deltas:
        return
    names = [*STEP_KEY, *(v for v, _ in STEP_VALUES), "duration_min", "duration_max"]
    types = [*("text" for _ in STEP_KEY), *(t for _, t in STEP_VALUES), "float8", "float8"]
    sets = ", ".join(f"{v} = {STEP_STATS}.{v} + EXCLUDED.{v}" for v, _ in STEP_VALUES)
    await cur.execute(
        f"""INSERT INTO {STEP_STATS} ({", ".join(names)})
            SELECT {_columns(types)} FROM jsonb_array_elements(%s::jsonb) AS e
            ON CONFLICT ({", ".join(STEP_KEY)}) DO UPDATE SET {sets},
              duration_min = LEAST({STEP_STATS}.duration_min, EXCLUDED.duration_min),
              duration_max = GREATEST({STEP_STATS}.duration_max, EXCLUDED.duration_max)""",
        (_rows_json([*k, *d, *extremes[k]] for k, d in sorted(deltas.items())),))


# ---------------------------------------------------------------------- reads


@dataclass(frozen=True, slots=True)
class TraceFilters:
    """What the analyzer narrows by: `since` inclusive, `until` exclusive (`started_at`)."""

    user_id: str | None = None
    agent: str | None = None
    model: str | None = None
    outcome: str | None = None
    since: float | None = None
    until: float | None = None
    query_class: str | None = None

    @property
    def aggregated(self) -> bool:
        """Whether the aggregates can answer (they have no outcome, time or class
        dimension)."""
        return (self.outcome is None and self.since is None and self.until is None
                and self.query_class is None)


ALL = TraceFilters()


def _where(tenant_id: str, f: TraceFilters, prefix: str = "", *,
           traces: bool = True) -> tuple[str, list[Any]]:
    clauses: list[str] = [f"{prefix}tenant_id = %s"]
    params: list[Any] = [tenant_id]
    pairs: list[tuple[str, Any]] = [("user_id", f.user_id), ("agent", f.agent),
                                    ("model", f.model)]
    if traces:
        pairs.append(("outcome", f.outcome))
        pairs.append(("query_class", f.query_class))
    for column, value in pairs:
        if value is not None:
            clauses.append(f"{prefix}{column} = %s")
            params.append(value)
    if traces and f.since is not None:
        clauses.append(f"{prefix}started_at >= %s")
        params.append(f.since)
    if traces and f.until is not None:
        clauses.append(f"{prefix}started_at < %s")
        params.append(f.until)
    return " AND ".join(clauses), params


def _ratio(num: Any, den: Any) -> float:
    return float(num) / float(den) if den else 0.0


def _mean(num: Any, den: Any) -> float | None:
    return float(num) / float(den) if den else None


#: per (model, agent) or overall, from the route aggregates or from the traces themselves
_ROUTE_SUMS = ("sum(count), sum(successes), sum(outcomes_known), sum(feedback_sum), "
               "sum(feedback_n), sum(latency_sum), sum(tokens_sum), sum(cost_sum), "
               "sum(steps_sum), sum(tool_calls_sum)")
_KNOWN = ", ".join(f"'{o}'" for o in KNOWN_OUTCOMES)
_TRACE_SUMS = ("count(*), count(*) FILTER (WHERE outcome = 'success'), "
               f"count(*) FILTER (WHERE outcome IN ({_KNOWN})), sum(feedback), "
               "count(feedback), sum(total_latency_seconds), sum(total_tokens), "
               "sum(coalesce(cost_usd, 0)), sum(step_count), sum(tool_calls)")


def _route_fields(r: Sequence[Any]) -> dict[str, Any]:
    n = int(r[0] or 0)
    return {
        "count": n,
        "successes": int(r[1] or 0),
        "outcomes_known": int(r[2] or 0),
        "success_rate": _ratio(r[1], r[2]),
        "avg_feedback": _mean(r[3], r[4]),
        "feedback_count": int(r[4] or 0),
        "avg_latency": _ratio(r[5], n),
        "avg_tokens": _ratio(r[6], n),
        "total_tokens": int(r[6] or 0),
        "total_cost_usd": float(r[7] or 0),
        "avg_steps": _ratio(r[8], n),
        "total_steps": int(r[8] or 0),
        "tool_calls": int(r[9] or 0),
    }


def _step_type_fields(r: Sequence[Any]) -> dict[str, Any]:
    n = int(r[1])
    mean = float(r[2]) / n if n else 0.0
    variance = max(0.0, float(r[3]) / n - mean * mean) if n > 1 else 0.0
    return {"count": n, "avg_duration": mean,
            "stdev_duration": (variance * n / (n - 1)) ** 0.5 if n > 1 else 0.0,
            "min_duration": float(r[4]), "max_duration": float(r[5]),
            "avg_prompt_tokens": _ratio(r[6], n), "avg_completion_tokens": _ratio(r[7], n),
            "energy_joules": float(r[8])}


async def summary(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL
                  ) -> dict[str, Any]:
    """Counts, means, success rate, mean feedback and the per-step-type figures."""
    if filters.aggregated:
        where, params = _where(tenant_id, filters)
        await cur.execute(f"SELECT {_ROUTE_SUMS} FROM {ROUTE_STATS} WHERE {where}", params)
        totals = await cur.fetchone()
        await cur.execute(
            f"""SELECT step_type, sum(count), sum(duration_sum), sum(duration_sq_sum),
                       min(duration_min), max(duration_max), sum(prompt_tokens_sum),
                       sum(completion_tokens_sum), sum(energy_joules_sum)
                FROM {STEP_STATS} WHERE {where} GROUP BY step_type ORDER BY step_type""",
            params)
    else:
        where, params = _where(tenant_id, filters)
        await cur.execute(f"SELECT {_TRACE_SUMS} FROM {TRACES} WHERE {where}", params)
        totals = await cur.fetchone()
        twhere, tparams = _where(tenant_id, filters, "t.")
        await cur.execute(
            f"""SELECT s.step_type, count(*), sum(s.duration_seconds),
                       sum(s.duration_seconds * s.duration_seconds), min(s.duration_seconds),
                       max(s.duration_seconds), sum(s.prompt_tokens),
                       sum(s.completion_tokens), sum(s.energy_joules)
                FROM {TRACES} t JOIN {STEPS} s ON s.tenant_id = t.tenant_id
                  AND s.user_id = t.user_id AND s.trace_id = t.trace_id
                WHERE {twhere} GROUP BY s.step_type ORDER BY s.step_type""",
            tparams)
    steps = {r[0]: _step_type_fields(r) for r in await cur.fetchall()}
    out = _route_fields(totals or (0,) * 10)
    out["traces"] = out.pop("count")
    out["step_types"] = steps
    out["energy_joules"] = sum(s["energy_joules"] for s in steps.values())
    return out


async def route_stats(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL
                      ) -> list[dict[str, Any]]:
    """Per (model, agent), sorted by model then agent."""
    where, params = _where(tenant_id, filters)
    if filters.aggregated:
        source, sums = ROUTE_STATS, _ROUTE_SUMS
    else:
        source, sums = TRACES, _TRACE_SUMS
    await cur.execute(f"SELECT model, agent, {sums} FROM {source} WHERE {where} "
                      "GROUP BY model, agent ORDER BY model, agent", params)
    return [{"model": r[0], "agent": r[1], **_route_fields(r[2:])}
            for r in await cur.fetchall()]


def _tool_fields(r: Sequence[Any]) -> dict[str, Any]:
    calls = int(r[1])
    return {"tool_name": r[0], "call_count": calls, "traces": int(r[2]),
            "successes": int(r[3]), "success_rate": _ratio(r[3], calls),
            "avg_latency": _ratio(r[4], calls)}


async def tool_stats(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL
                     ) -> list[dict[str, Any]]:
    """Per tool name (from the steps' `input.tool` or `metadata.tool_name`), sorted by name.
    The tool aggregates are per user; a filter on anything else reads the selected traces'
    steps."""
    if filters.aggregated and filters.agent is None and filters.model is None:
        where, params = _where(tenant_id, filters)
        await cur.execute(
            f"""SELECT tool_name, sum(calls), sum(traces), sum(successes), sum(duration_sum)
                FROM {TOOL_STATS} WHERE {where} GROUP BY tool_name ORDER BY tool_name""",
            params)
    else:
        where, params = _where(tenant_id, filters, "t.")
        await cur.execute(
            f"""SELECT s.tool_name, count(*), count(DISTINCT (s.user_id, s.trace_id)),
                       count(*) FILTER (WHERE s.succeeded), sum(s.duration_seconds)
                FROM {TRACES} t JOIN {STEPS} s ON s.tenant_id = t.tenant_id
                  AND s.user_id = t.user_id AND s.trace_id = t.trace_id
                WHERE {where} AND s.tool_name IS NOT NULL
                GROUP BY s.tool_name ORDER BY s.tool_name""", params)
    return [_tool_fields(r) for r in await cur.fetchall()]


async def class_stats(cur: AsyncCursor[Any], tenant_id: str, user_id: str | None = None
                      ) -> list[dict[str, Any]]:
    """Per (query class, model), sorted by class then model: what the learned policies read."""
    where, params = _where(tenant_id, TraceFilters(user_id=user_id), traces=False)
    await cur.execute(
        f"""SELECT query_class, model, sum(count), sum(successes), sum(outcomes_known),
                   sum(feedback_sum), sum(feedback_n), sum(reward_sum), sum(reward_n)
            FROM {CLASS_STATS} WHERE {where}
            GROUP BY query_class, model ORDER BY query_class, model""", params)
    return [{"query_class": r[0], "model": r[1], "count": int(r[2]),
             "successes": int(r[3]), "outcomes_known": int(r[4]),
             "success_rate": _ratio(r[3], r[4]), "avg_feedback": _mean(r[5], r[6]),
             "feedback_count": int(r[6]), "feedback_sum": float(r[5] or 0),
             "avg_reward": _mean(r[7], r[8]), "reward_count": int(r[8]),
             "reward_sum": float(r[7] or 0)} for r in await cur.fetchall()]


async def class_figures(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL
                        ) -> list[dict[str, Any]]:
    """Per (query class, model), sorted by class then model, from the traces the filter
    selects: `route_stats`' figures and the mean reward."""
    where, params = _where(tenant_id, filters)
    await cur.execute(
        f"""SELECT query_class, model, {_TRACE_SUMS}, avg(reward)
            FROM {TRACES} WHERE {where}
            GROUP BY query_class, model ORDER BY query_class, model""", params)
    return [{"query_class": r[0], "model": r[1], **_route_fields(r[2:12]),
             "avg_reward": None if r[12] is None else float(r[12])}
            for r in await cur.fetchall()]


# -- listing, paging, lookup, search

_LISTED = tuple(c for c in TRACE_COLUMNS if c not in ("tenant_id", "seq"))


def _trace_dict(r: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_LISTED, r, strict=True))


class Opener:
    """Opens one read's values with their users' keys. A user whose keys were destroyed is
    remembered as gone: their rows are left out (an erasure under way deletes them next), and
    their key is not looked for again in this read."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.gone: set[str] = set()

    def trace(self, row: dict[str, Any]) -> bool:
        """Open the row's query and result in place; False when its user is gone."""
        user = row["user_id"]
        if user in self.gone:
            return False
        try:
            row["query"] = COLUMNS.open(self.tenant_id, user, row["query"])
            row["result"] = COLUMNS.open(self.tenant_id, user, row["result"])
        except Shredded:
            self.gone.add(user)
            return False
        return True

    def traces(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if self.trace(r)]

    def json(self, user_id: str, value: Any) -> Any:
        """A jsonb value sealed whole, opened (Shredded when the user is gone)."""
        if user_id in self.gone:
            raise Shredded(f"the keys of {self.tenant_id}/{user_id} were destroyed")
        try:
            return COLUMNS.open_json(self.tenant_id, user_id, value)
        except Shredded:
            self.gone.add(user_id)
            raise


def encode_cursor(started_at: float, user_id: str, trace_id: str) -> str:
    raw = json.dumps([started_at, user_id, trace_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str, str]:
    """The position a page ended at; a cursor that is not one of ours is a ValueError."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, user, trace = json.loads(raw)
        if not isinstance(user, str) or not isinstance(trace, str):
            raise TypeError
        return float(at), user, trace
    except (ValueError, TypeError, binascii.Error) as exc:
        raise ValueError("not a cursor of traces.list") from exc


async def list_traces(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL,
                      limit: int = 50, cursor: str | None = None,
                      opener: Opener | None = None
                      ) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first (started_at, then user and trace id, descending); the next page's
    cursor, None after the last page. A page may hold fewer than `limit` traces when some
    were of a user being erased (the cursor still moves past them)."""
    where, params = _where(tenant_id, filters)
    if cursor is not None:
        where += " AND (started_at, user_id, trace_id) < (%s, %s, %s)"
        params.extend(decode_cursor(cursor))
    await cur.execute(
        f"""SELECT {", ".join(_LISTED)} FROM {TRACES} WHERE {where}
            ORDER BY started_at DESC, user_id DESC, trace_id DESC LIMIT %s""",
        [*params, limit + 1])
    rows = [_trace_dict(r) for r in await cur.fetchall()]
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    after = (None if last is None
             else encode_cursor(last["started_at"], last["user_id"], last["trace_id"]))
    return (opener or Opener(tenant_id)).traces(rows), after


async def _steps_of(cur: AsyncCursor[Any], opener: Opener,
                    keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], list[Any]]:
    """The steps of (user, trace id) pairs, in order, opened (a pair whose user is gone is
    left out)."""
    out: dict[tuple[str, str], list[Any]] = {k: [] for k in keys}
    if not keys:
        return out
    await cur.execute(
        f"""SELECT s.user_id, s.trace_id, s.step_type, s.timestamp, s.duration_seconds,
                   s.input, s.output, s.metadata, s.tool_name
            FROM {STEPS} s JOIN unnest(%b::text[], %b::text[]) AS k(u, id)
              ON s.tenant_id = %s AND s.user_id = k.u AND s.trace_id = k.id
            ORDER BY s.user_id, s.trace_id, s.ordinal""",
        ([k[0] for k in keys], [k[1] for k in keys], opener.tenant_id))
    for r in await cur.fetchall():
        user = r[0]
        try:
            step = {"step_type": r[2], "timestamp": r[3], "duration_seconds": r[4],
                    "input": opener.json(user, r[5]), "output": opener.json(user, r[6]),
                    "metadata": opener.json(user, r[7]), "tool_name": r[8]}
        except Shredded:
            continue
        out[(user, r[1])].append(step)
    return {k: v for k, v in out.items() if k[0] not in opener.gone}


async def results(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                  trace_ids: Sequence[str]) -> dict[str, str]:
    """The answers (`result`) of some of the user's traces, by trace id (none once the
    user's keys are destroyed)."""
    if not trace_ids:
        return {}
    await cur.execute(f"SELECT trace_id, result FROM {TRACES} WHERE tenant_id = %s AND "
                      "user_id = %s AND trace_id = ANY(%s)", (tenant_id, user_id,
                                                             list(trace_ids)))
    try:
        return {r[0]: COLUMNS.open(tenant_id, user_id, r[1]) for r in await cur.fetchall()}
    except Shredded:
        return {}


async def get_trace(cur: AsyncCursor[Any], tenant_id: str, trace_id: str,
                    user_id: str | None = None) -> dict[str, Any] | None:
    """One trace with its steps (without `user_id`, the first user's with that id; None also
    when its user's keys are destroyed)."""
    where, params = "tenant_id = %s AND trace_id = %s", [tenant_id, trace_id]
    if user_id is not None:
        where += " AND user_id = %s"
        params.append(user_id)
    await cur.execute(f"SELECT {', '.join(_LISTED)} FROM {TRACES} WHERE {where} "
                      "ORDER BY user_id LIMIT 1", params)
    r = await cur.fetchone()
    opener = Opener(tenant_id)
    if r is None or not opener.trace(trace := _trace_dict(r)):
        return None
    key = (trace["user_id"], trace["trace_id"])
    steps = await _steps_of(cur, opener, [key])
    if key not in steps:
        return None
    trace["steps"] = steps[key]
    return trace


#: the most candidates a search opens and ranks (the newest that hold its words)
SEARCH_CANDIDATES = 5_000


def term_forms(tenant_id: str, user_id: str, words: Sequence[str]) -> list[set[str]] | None:
    """Per word, the terms it may be stored as for the user: sealed with the user's key, and
    as it is (the terms of traces stored before sealing). None when the user's keys were
    destroyed. Never makes keys for a user: a search reads, it does not enrol anyone."""
    keyring = COLUMNS.keyring
    sealing = keyring is not None
    if keyring is not None:
        try:
            keyring.existing_column(tenant_id, user_id)  # and cached: `seal` finds it there
        except Shredded:
            return None
        except KeyMissing:
            sealing = False  # traces from before sealing: their terms are plain
    return [{w, COLUMNS.seal(tenant_id, user_id, w)} if sealing else {w} for w in words]


async def search(cur: AsyncCursor[Any], tenant_id: str, text: str, limit: int = 20,
                 user_id: str | None = None) -> list[dict[str, Any]]:
    """Traces whose query or result match `text` (web-search syntax: words, "phrases",
    -not, or; see services.trace_router.search), best match first, then newest.

    The words are sealed for every user searched (the tenant's users with traces, without
    `user_id`) and looked up in `traces.search_terms` at once; the traces that hold what some
    `or` part needs (and none of its excluded words) are read, newest first, at most
    `SEARCH_CANDIDATES`, opened, and matched and ranked on their text."""
    query = text_search.parse(text)
    if not query.parts:
        return []
    words = query.vocabulary
    if user_id is None:
        # every user with a trace has a route aggregate: a small table to list them from
        await cur.execute(f"SELECT DISTINCT user_id FROM {ROUTE_STATS} WHERE tenant_id = %s",
                          (tenant_id,))
        users = [r[0] for r in await cur.fetchall()]
    else:
        users = [user_id]
    lookup: tuple[list[str], list[str], list[int]] = ([], [], [])
    for user in users:
        forms = term_forms(tenant_id, user, words)
        for i, found in enumerate(forms or ()):
            for term in sorted(found):
                lookup[0].append(user)
                lookup[1].append(term)
                lookup[2].append(i)
    if not lookup[0]:
        return []
    needs = query.needs()
    wanted = " OR ".join("(m.found @> %b::int[] AND NOT m.found && %b::int[])" for _ in needs)
    cols = ", ".join(f"t.{c}" for c in _LISTED)
    await cur.execute(
        f"""SELECT {cols} FROM (
              SELECT s.user_id, s.trace_id, array_agg(q.i) AS found
              FROM {SEARCH_TERMS} s
              JOIN unnest(%b::text[], %b::text[], %b::int[]) AS q(u, term, i)
                ON s.tenant_id = %s AND s.user_id = q.u AND s.term = q.term
              GROUP BY s.user_id, s.trace_id) m
            JOIN {TRACES} t ON t.tenant_id = %s AND t.user_id = m.user_id
              AND t.trace_id = m.trace_id
            WHERE {wanted}
            ORDER BY t.started_at DESC, t.user_id, t.trace_id LIMIT %s""",
        [*lookup, tenant_id, tenant_id, *(x for need in needs for x in need),
         SEARCH_CANDIDATES])
    hits = []
    for row in Opener(tenant_id).traces(_trace_dict(r) for r in await cur.fetchall()):
        rank = text_search.rank(query, row["query"], row["result"])
        if rank is not None:
            hits.append({**row, "rank": rank})
    # newest first already: a stable sort by rank keeps that order among equal ranks
    hits.sort(key=lambda h: -h["rank"])
    return hits[:limit]


async def export_page(cur: AsyncCursor[Any], tenant_id: str, filters: TraceFilters = ALL,
                      after: str | None = None, limit: int = 500
                      ) -> tuple[list[dict[str, Any]], str | None]:
    """A page of whole traces (with steps) in `list_traces`' order, for JSON lines."""
    opener = Opener(tenant_id)
    rows, cursor = await list_traces(cur, tenant_id, filters, limit, after, opener)
    steps = await _steps_of(cur, opener, [(r["user_id"], r["trace_id"]) for r in rows])
    page = []
    for row in rows:
        key = (row["user_id"], row["trace_id"])
        if key in steps:
            row["steps"] = steps[key]
            page.append(row)
    return page, cursor
