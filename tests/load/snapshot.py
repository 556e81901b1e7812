"""What a running Habitus has spent so far: CPU per process, statements per schema, messages
per subject kind. A load run takes one snapshot before the burst and one after the drain; the
difference, divided by the turns sent, is the cost table of the report.

Each part says why it could not be measured instead of guessing: no pids (a stack that is not
`habitus up`'s), no pg_stat_statements (a server that does not preload it), and the report
prints that reason in the table's place.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg

from habitus.bus.streams import DLQ, EVENTS, INGEST
from habitus.subjects import DLQ_ROOT, EVENT_ROOT, INGEST_ROOT

#: statements of this session are not counted (the runner's own lag sampling and snapshots
#: would otherwise be charged to the schemas whose checkpoints it reads); superuser only
UNTRACKED = "-c pg_stat_statements.track=none"


@dataclass
class Snapshot:
    at: float
    #: process name -> CPU seconds (user + system, with reaped children: Postgres's backends)
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_note: str | None = None
    #: (queryid, text) -> calls, of this database
    statements: dict[tuple[int, str], int] = field(default_factory=dict)
    statements_note: str | None = None
    #: (stream, subject kind) -> messages of the run's tenants
    messages: Counter[tuple[str, str]] = field(default_factory=Counter)


# -- CPU ---------------------------------------------------------------------------------------

def cpu_seconds(children: dict[str, Any]) -> tuple[dict[str, float], str | None]:
    """CPU seconds of each process runtime.json names, by its name; a process whose start time
    differs from the recorded one is another process with a reused pid, and is left out."""
    try:
        import psutil
    except ImportError:
        return {}, "not measured: psutil is not installed"
    if not children:
        return {}, "not measured: no pids (the stack is not a `habitus up` on this data dir)"
    out: dict[str, float] = {}
    for name, child in children.items():
        try:
            proc = psutil.Process(int(child["pid"]))
            if abs(proc.create_time() - float(child["create_time"])) > 1.0:
                continue
            with proc.oneshot():
                t = proc.cpu_times()
                total = t.user + t.system + t.children_user + t.children_system
            for sub in proc.children(recursive=True):  # live backends, a fork's workers
                try:
                    s = sub.cpu_times()
                    total += s.user + s.system
                except psutil.Error:
                    continue
            out[str(name)] = total
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
    return out, None if out else "not measured: none of the recorded pids is alive"


def own_cpu() -> float:
    """This process's CPU and its reaped children's (the locust process, once it exited)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


# -- Postgres ----------------------------------------------------------------------------------

def untracked_url(url: str) -> str:
    """`url` with this session's statements left out of pg_stat_statements."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = (query.get("options", "") + " " + UNTRACKED).strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


async def enable_statements(url: str) -> str | None:
    """Create pg_stat_statements where the server preloads it; None when it can be used, else
    why not (the report says it in the statements table's place)."""
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            row = await (await conn.execute("SHOW shared_preload_libraries")).fetchone()
            if row is None or "pg_stat_statements" not in str(row[0]):
                return ("not measured: the server does not preload pg_stat_statements "
                        "(`habitus up`'s embedded Postgres does)")
            row = await (await conn.execute(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).fetchone()
            if not (row and row[0]):
                return "not measured: the database user is not a superuser"
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    except psycopg.Error as exc:
        return f"not measured: {type(exc).__name__}: {str(exc).strip()[:200]}"
    return None


async def statements(url: str) -> dict[tuple[int, str], int]:
    """Calls of every statement pg_stat_statements knows in this database."""
    async with await psycopg.AsyncConnection.connect(untracked_url(url),
                                                     autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT queryid, query, sum(calls)::bigint FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "GROUP BY queryid, query")
        return {(int(q or 0), str(text)): int(calls) for q, text, calls in await cur.fetchall()}


def schema_of(query: str, schemas: list[str]) -> str:
    """The schema a statement works on, from the names it qualifies (services qualify every
    table they touch); the others are labelled by what they are (transaction control,
    liveness checks, advisory locks)."""
    named = [s for s in schemas if re.search(rf'(?<![\w."])"?{re.escape(s)}"?\.', query)]
    if not named:
        return _unqualified(query)
    return named[0] if len(named) == 1 else "+".join(sorted(named))


#: what the statements that name no schema are, by their first words
_UNQUALIFIED = (
    (re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|START TRANSACTION|SET TRANSACTION)",
                re.I), "(transaction control)"),
    (re.compile(r"^\s*SELECT\s+\$1\s*$", re.I), "(SELECT 1: liveness checks)"),
    (re.compile(r"advisory", re.I), "(advisory locks)"),
)


def _unqualified(query: str) -> str:
    for pattern, label in _UNQUALIFIED:
        if pattern.search(query):
            return label
    return "(other, no schema named)"


def by_schema(before: dict[tuple[int, str], int], after: dict[tuple[int, str], int],
              schemas: list[str]) -> dict[str, int]:
    """Statements executed between two snapshots, summed by `schema_of`."""
    out: Counter[str] = Counter()
    for key, calls in after.items():
        done = calls - before.get(key, 0)
        if done > 0:
            out[schema_of(key[1], schemas)] += done
    return dict(out)


# -- JetStream ---------------------------------------------------------------------------------

STREAM_ROOTS = ((INGEST, INGEST_ROOT), (EVENTS, EVENT_ROOT), (DLQ, DLQ_ROOT))


async def messages(js: Any, tenants: list[str]) -> Counter[tuple[str, str]]:
    """Messages of `tenants` in each stream, by subject kind (the ingest kind, the event type,
    the dead-lettering consumer): the token after the root."""
    out: Counter[tuple[str, str]] = Counter()
    for stream, root in STREAM_ROOTS:
        for tenant in tenants:
            info = await js.stream_info(stream, subjects_filter=f"{root}.*.{tenant}.>")
            for subject, n in (info.state.subjects or {}).items():
                kind = subject.removeprefix(root + ".").split(".", 1)[0]
                out[(stream, kind)] += int(n)
    return out


# -- how the gateway served prompt.context ------------------------------------------------------

CONTEXT_OUTCOMES = "habitus_gateway_prompt_context_total"
#: the hits answered from the gateway's memory (a part of the hits), reported as "local"
LOCAL_HITS = "habitus_gateway_prompt_context_local_total"


def context_outcomes_in(text: str) -> dict[str, float]:
    """`prompt.context` calls by how the gateway served them (hit, miss, forwarded, and the
    hits from its memory as local), from its /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == CONTEXT_OUTCOMES:
                out[sample.labels["outcome"]] = sample.value
            elif sample.name == LOCAL_HITS:
                out["local"] = sample.value
    return out


async def context_outcomes(url: str) -> tuple[dict[str, float], str | None]:
    """The gateway's counts so far; with several gateways behind `url`, one gateway's."""
    import httpx

    try:
        async with httpx.AsyncClient(base_url=url, timeout=10, verify=False) as client:
            response = await client.get("/metrics")
            response.raise_for_status()
    except httpx.HTTPError as exc:
        return {}, f"not measured: the gateway's /metrics did not answer ({exc!r})"
    return context_outcomes_in(response.text), None
