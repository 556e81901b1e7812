"""Per-tenant daily LLM budgets: calls and tokens per UTC day.

A model endpoint costs money per token, and one tenant's flood of material must not spend
everyone's quota, so every call is checked against the tenant's usage of the day before it is
made and recorded after it completes. Usage lives behind `UsageStore`: Postgres in the services
(shared by all replicas and surviving restarts), a dict in unit tests.

The check and the record are not one transaction: calls running concurrently each pass the
check, so a tenant may overshoot its budget by at most the calls in flight. That is the price
of not holding a row lock for the length of a model call.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

from psycopg_pool import AsyncConnectionPool

from habitus.llm import metrics
from habitus.llm.errors import BudgetExhausted

log = logging.getLogger(__name__)

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class UsageStore(Protocol):
    async def used(self, tenant_id: str, day: datetime.date) -> tuple[int, int]:
        """(calls, tokens in + out) the tenant used on `day`; (0, 0) when nothing."""
        ...

    async def add(self, tenant_id: str, day: datetime.date, *, calls: int, tokens_in: int,
                  tokens_out: int) -> None: ...


class MemoryUsage:
    """A `UsageStore` in a dict: per process, gone at exit (tests, one-off tools)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, datetime.date], tuple[int, int, int]] = {}

    async def used(self, tenant_id: str, day: datetime.date) -> tuple[int, int]:
        calls, tokens_in, tokens_out = self._rows.get((tenant_id, day), (0, 0, 0))
        return calls, tokens_in + tokens_out

    async def add(self, tenant_id: str, day: datetime.date, *, calls: int, tokens_in: int,
                  tokens_out: int) -> None:
        c, i, o = self._rows.get((tenant_id, day), (0, 0, 0))
        self._rows[(tenant_id, day)] = (c + calls, i + tokens_in, o + tokens_out)


def usage_table_sql(schema: str) -> list[str]:
    """Idempotent statements creating `<schema>.llm_usage`; the owning service's migration runs
    them. One row per tenant and UTC day: an upsert adds to it, so replicas share the count."""
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {schema}.llm_usage (
            tenant_id text NOT NULL,
            day date NOT NULL,
            calls bigint NOT NULL DEFAULT 0,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, day)
        )""",
    ]


class PostgresUsage:
    """A `UsageStore` over `<schema>.llm_usage` (see `usage_table_sql`)."""

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str) -> None:
        if not _SCHEMA_RE.match(schema):
            raise ValueError(f"invalid schema name {schema!r}")
        self._pool = pool
        self._table = f"{schema}.llm_usage"

    async def used(self, tenant_id: str, day: datetime.date) -> tuple[int, int]:
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT calls, tokens_in + tokens_out FROM {self._table} "
                "WHERE tenant_id = %s AND day = %s",
                (tenant_id, day),
            )
            row = await cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    async def add(self, tenant_id: str, day: datetime.date, *, calls: int, tokens_in: int,
                  tokens_out: int) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {self._table} AS u (tenant_id, day, calls, tokens_in, tokens_out) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, day) DO UPDATE SET "
                "calls = u.calls + EXCLUDED.calls, tokens_in = u.tokens_in + EXCLUDED.tokens_in, "
                "tokens_out = u.tokens_out + EXCLUDED.tokens_out, updated_at = now()",
                (tenant_id, day, calls, tokens_in, tokens_out),
            )


def utc_day(now: float) -> datetime.date:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).date()


def seconds_to_utc_midnight(now: float) -> float:
    """Seconds from `now` to the next UTC midnight, when every daily budget resets."""
    next_day = datetime.datetime.combine(utc_day(now) + datetime.timedelta(days=1),
                                         datetime.time(), datetime.UTC)
    return next_day.timestamp() - now


class Budget:
    """Daily calls and tokens per tenant over a `UsageStore`; a limit of 0 means no limit.

    A refusal is counted on every call it stops but logged once per tenant per UTC day per
    process: a tenant over budget would otherwise log a warning for every window it sends."""

    def __init__(self, store: UsageStore, *, daily_calls: int, daily_tokens: int, service: str,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._daily_calls = daily_calls
        self._daily_tokens = daily_tokens
        self._service = service
        self._clock = clock
        self._warned: dict[str, datetime.date] = {}
        #: per tenant checked today: the share of its calls and tokens left (for the gauge)
        self._left: dict[str, tuple[float, float]] = {}
        self._left_day: datetime.date | None = None

    async def check(self, tenant_id: str) -> None:
        """Raise `BudgetExhausted` if the tenant has spent today's calls or tokens."""
        now = self._clock()
        day = utc_day(now)
        calls, tokens = await self._store.used(tenant_id, day)
        self._gauge(tenant_id, day, calls, tokens)
        spent: Literal["calls", "tokens"]
        if 0 < self._daily_calls <= calls:
            spent = "calls"
        elif 0 < self._daily_tokens <= tokens:
            spent = "tokens"
        else:
            return
        metrics.BUDGET_EXHAUSTED.labels(self._service, spent).inc()
        if self._warned.get(tenant_id) != day:
            self._warned[tenant_id] = day
            log.warning("llm budget exhausted", extra={
                "service": self._service, "tenant_id": tenant_id, "budget": spent,
                "calls": calls, "tokens": tokens, "day": day.isoformat()})
        raise BudgetExhausted(spent, retry_after=seconds_to_utc_midnight(now))

    def _gauge(self, tenant_id: str, day: datetime.date, calls: int, tokens: int) -> None:
        """`habitus_llm_budget_remaining_ratio`: the least share left over the tenants checked
        today (a new UTC day starts from a full budget)."""
        if self._left_day != day:
            self._left_day, self._left = day, {}

        def left(limit: int, used: int) -> float:
            return 1.0 if limit <= 0 else max(0.0, 1.0 - used / limit)

        self._left[tenant_id] = (left(self._daily_calls, calls), left(self._daily_tokens, tokens))
        metrics.BUDGET_REMAINING.labels(self._service, "calls").set(
            min(c for c, _ in self._left.values()))
        metrics.BUDGET_REMAINING.labels(self._service, "tokens").set(
            min(t for _, t in self._left.values()))

    async def record(self, tenant_id: str, tokens_in: int, tokens_out: int) -> None:
        """Add one completed call and its tokens to the tenant's usage of today."""
        await self._store.add(tenant_id, utc_day(self._clock()), calls=1, tokens_in=tokens_in,
                              tokens_out=tokens_out)
