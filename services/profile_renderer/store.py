"""The `profile` schema: what PROFILE.md is rendered from, its versions, the mirror's state."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool
from pydantic_core import to_json

from habitus.context_cache import Stamp
from habitus.ids import TENANT_WIDE
from habitus.projection.checkpoints import CheckpointStore
from habitus.prompt import ProfileFacet, ProvisionalFacet, ToolRule
from habitus.subjects import slot_of

SCHEMA = "profile"
FACETS = f"{SCHEMA}.facets"
PROVISIONAL = f"{SCHEMA}.provisional_facets"
ACCOUNTS = f"{SCHEMA}.accounts"
RULES = f"{SCHEMA}.tool_rules"
DOCUMENTS = f"{SCHEMA}.documents"
MIRROR = f"{SCHEMA}.mirror"
TABLES = (FACETS, PROVISIONAL, ACCOUNTS, RULES, DOCUMENTS)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Document:
    version: int
    markdown: str
    sha256: str
    origin: str
    cause_event_id: str


async def replace_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                         facets: Sequence[ProfileFacet]) -> None:
    await cur.execute(f"DELETE FROM {FACETS} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, user_id))
    if facets:  # one statement for the user's facets, not one per facet
        await cur.execute(
            f"""INSERT INTO {FACETS} (tenant_id, user_id, class, key, value, pinned, stability,
                    origin)
                SELECT %s, %s, c, k, v, p, s, o
                FROM unnest(%s::text[], %s::text[], %s::text[], %s::bool[], %s::float8[],
                            %s::text[]) AS x(c, k, v, p, s, o)""",
            (tenant_id, user_id, [f.facet_class for f in facets], [f.key for f in facets],
             [f.value for f in facets], [f.pinned for f in facets],
             [f.stability for f in facets], [f.origin for f in facets]),
        )


async def load_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                      ) -> list[ProfileFacet]:
    await cur.execute(f"SELECT class, key, value, pinned, stability, origin FROM {FACETS} "
                      "WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
    return [ProfileFacet(r[0], r[1], r[2], bool(r[3]), r[4], r[5])
            for r in await cur.fetchall()]


def strongest_per_key(facets: Sequence[ProvisionalFacet]) -> list[ProvisionalFacet]:
    """One facet per (class, key), its strongest value (ties: the smaller value), so a list
    that names a key twice is stored, not refused by the key and dead-lettered."""
    best: dict[tuple[str, str], ProvisionalFacet] = {}
    for facet in facets:
        seen = best.get((facet.facet_class, facet.key))
        if seen is None or (-facet.stability, facet.value) < (-seen.stability, seen.value):
            best[(facet.facet_class, facet.key)] = facet
    return list(best.values())


async def replace_provisional(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                              facets: Sequence[ProvisionalFacet]) -> list[ProvisionalFacet]:
    """The user's not-yet-sure facets are now `facets` (each rebuild states the whole list);
    returns what was stored (one per key), so a render need not read it back."""
    await cur.execute(f"DELETE FROM {PROVISIONAL} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, user_id))
    fresh = strongest_per_key(facets)
    if fresh:  # one statement, as for the facets; each evidence list travels as JSON
        await cur.execute(
            f"""INSERT INTO {PROVISIONAL} (tenant_id, user_id, class, key, value, stability,
                    evidence)
                SELECT %s, %s, c, k, v, s, ARRAY(
                    SELECT item FROM jsonb_array_elements_text(e::jsonb) WITH ORDINALITY
                         AS i(item, n) ORDER BY n)
                FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[], %s::text[])
                     AS x(c, k, v, s, e)""",
            (tenant_id, user_id, [f.facet_class for f in fresh], [f.key for f in fresh],
             [f.value for f in fresh], [f.stability for f in fresh],
             [to_json(list(f.evidence)).decode() for f in fresh]),
        )
    return fresh


async def load_provisional(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                           ) -> list[ProvisionalFacet]:
    await cur.execute(f"SELECT class, key, value, stability, evidence FROM {PROVISIONAL} "
                      "WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
    return [ProvisionalFacet(r[0], r[1], r[2], float(r[3]), tuple(r[4]))
            for r in await cur.fetchall()]


async def upsert_account(cur: AsyncCursor[Any], tenant_id: str, user_id: str, toolkit: str,
                         connection_id: str, label: str) -> None:
    await cur.execute(
        f"""INSERT INTO {ACCOUNTS} (tenant_id, user_id, toolkit, connection_id, label)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, toolkit, connection_id)
            DO UPDATE SET label = EXCLUDED.label""",
        (tenant_id, user_id, toolkit, connection_id, label))


async def load_accounts(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                        ) -> list[tuple[str, str]]:
    """(toolkit, label) pairs."""
    await cur.execute(f"SELECT toolkit, label FROM {ACCOUNTS} WHERE tenant_id = %s AND "
                      "user_id = %s ORDER BY toolkit, label", (tenant_id, user_id))
    return [(r[0], r[1]) for r in await cur.fetchall()]


async def upsert_rule(cur: AsyncCursor[Any], tenant_id: str, user_id: str, rule: ToolRule,
                      scope: str = "user") -> None:
    """The rule as it now stands; `user_id` is `TENANT_WIDE` for a tenant-scoped rule."""
    await cur.execute(
        f"""INSERT INTO {RULES} (tenant_id, user_id, rule_id, tool_name, rule, priority,
                updated_at, scope)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, rule_id) DO UPDATE SET tool_name =
              EXCLUDED.tool_name, rule = EXCLUDED.rule, priority = EXCLUDED.priority,
              updated_at = EXCLUDED.updated_at, scope = EXCLUDED.scope""",
        (tenant_id, user_id, rule.rule_id, rule.tool_name, rule.rule, rule.priority,
         rule.updated_at, scope))


async def delete_rule(cur: AsyncCursor[Any], tenant_id: str, user_id: str, rule_id: str
                      ) -> None:
    await cur.execute(f"DELETE FROM {RULES} WHERE tenant_id = %s AND user_id = %s AND "
                      "rule_id = %s", (tenant_id, user_id, rule_id))


async def version_of(cur: AsyncCursor[Any], tenant_id: str, user_id: str, version: int
                     ) -> Document | None:
    """Version `version` of the user's document (None: there is no such version)."""
    await cur.execute(
        f"SELECT version, markdown, sha256, origin, cause_event_id FROM {DOCUMENTS} "
        "WHERE tenant_id = %s AND user_id = %s AND version = %s", (tenant_id, user_id, version))
    row = await cur.fetchone()
    return None if row is None else Document(int(row[0]), row[1], row[2], row[3], row[4])


async def latest(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> Document | None:
    await cur.execute(
        f"SELECT version, markdown, sha256, origin, cause_event_id FROM {DOCUMENTS} "
        "WHERE tenant_id = %s AND user_id = %s ORDER BY version DESC LIMIT 1",
        (tenant_id, user_id))
    row = await cur.fetchone()
    return None if row is None else Document(int(row[0]), row[1], row[2], row[3], row[4])


async def saved_since(cur: AsyncCursor[Any], tenant_id: str, user_id: str, version: int
                      ) -> bool:
    """Did a user's save create a version after `version`? (compare-and-swap on notes)"""
    await cur.execute(f"SELECT 1 FROM {DOCUMENTS} WHERE tenant_id = %s AND user_id = %s AND "
                      "version > %s AND origin = 'notes' LIMIT 1", (tenant_id, user_id, version))
    return await cur.fetchone() is not None


async def version_caused_by(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                            cause_event_id: str) -> int | None:
    """The version that event `cause_event_id` created for the user (None: it made none)."""
    await cur.execute(
        f"SELECT version FROM {DOCUMENTS} WHERE tenant_id = %s AND user_id = %s "
        "AND cause_event_id = %s", (tenant_id, user_id, cause_event_id))
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def add_version(cur: AsyncCursor[Any], tenant_id: str, user_id: str, version: int,
                      markdown: str, origin: str, cause_event_id: str,
                      blocks_changed: Sequence[str]) -> str:
    digest = sha256(markdown)
    await cur.execute(
        f"""INSERT INTO {DOCUMENTS} (tenant_id, user_id, version, markdown, sha256, origin,
                cause_event_id, blocks_changed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
        (tenant_id, user_id, version, markdown, digest, origin, cause_event_id,
         list(blocks_changed)))
    return digest


@dataclass(frozen=True, slots=True)
class ContextInputs:
    """What `prompt.context` is built from, as of one committed state."""

    #: where `profile.render` was for that state (what the cached entry is stamped with): the
    #: checkpoint of the partition holding the user, and of the one holding the tenant's
    #: tenant-wide changes (one and the same when the projection is not split)
    stamp: Stamp
    facets: list[ProfileFacet]
    #: the latest document's version and markdown (None: no version yet)
    document: tuple[int, str] | None
    rules: list[ToolRule]
    provisional: list[ProvisionalFacet]


async def context_inputs(pool: AsyncConnectionPool, projection: str, tenant_id: str,
                         user_id: str, unconfirmed: bool) -> ContextInputs:
    """Everything `prompt.context` needs, in one statement: one statement sees one committed
    state, as a read-only transaction does, and costs one round trip where the transaction's
    reads took eight (BEGIN, its isolation level, the checkpoint, facets, document, rules,
    not-yet-sure facets, COMMIT). Under load each round trip waits for a core: the reads of a
    cache miss were most of `prompt.context`'s latency.

    The rules are the user's own and the tenant's (`TENANT_WIDE`), never another user's: a row
    is read only under the user's id or the reserved one, which no caller's user id can be
    (`habitus.ids.CALLER_USER_PATTERN`)."""
    sql = f"""
        SELECT ({CheckpointStore(SCHEMA).last_seq_query("%(p)s", "%(slot)s")}),
          ({CheckpointStore(SCHEMA).last_seq_query("%(p)s", "%(tslot)s")}),
          (SELECT coalesce(json_agg(json_build_array(class, key, value, pinned, stability,
                                                     origin)), '[]')
             FROM {FACETS} WHERE tenant_id = %(t)s AND user_id = %(u)s),
          (SELECT json_build_array(version, markdown) FROM {DOCUMENTS}
             WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY version DESC LIMIT 1),
          (SELECT coalesce(json_agg(json_build_array(rule_id, tool_name, rule, priority,
                                                     updated_at)), '[]')
             FROM {RULES} WHERE tenant_id = %(t)s AND user_id IN (%(u)s, %(all)s)),
          CASE WHEN %(unsure)s THEN
            (SELECT coalesce(json_agg(json_build_array(class, key, value, stability,
                                                       evidence)), '[]')
               FROM {PROVISIONAL} WHERE tenant_id = %(t)s AND user_id = %(u)s)
          END"""
    params = {"p": projection, "t": tenant_id, "u": user_id, "all": TENANT_WIDE,
              "unsure": unconfirmed, "slot": slot_of(tenant_id, user_id),
              "tslot": slot_of(tenant_id, TENANT_WIDE)}
    async with pool.connection() as conn:
        # autocommit for this one statement: no BEGIN before it, no COMMIT after; the pool's
        # connections are otherwise transactional, so it is set back before the return
        await conn.set_autocommit(True)
        try:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        finally:
            await conn.set_autocommit(False)
    assert row is not None
    stamp, tenant_stamp, facets, document, rules, provisional = row
    return ContextInputs(
        stamp=Stamp(int(stamp or 0), int(tenant_stamp or 0)),
        facets=[ProfileFacet(f[0], f[1], f[2], bool(f[3]),
                             None if f[4] is None else float(f[4]), f[5]) for f in facets],
        document=None if document is None else (int(document[0]), str(document[1])),
        rules=[ToolRule(r[0], r[1], r[2], r[3], float(r[4])) for r in rules],
        provisional=[ProvisionalFacet(f[0], f[1], f[2], float(f[3]), tuple(f[4] or ()))
                     for f in provisional or ()],
    )


@asynccontextmanager
async def snapshot(pool: AsyncConnectionPool) -> AsyncIterator[AsyncCursor[Any]]:
    """A cursor whose reads all see one committed state. Reads made statement by statement
    can straddle a render's commit: no document yet, but already its facets."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        async with conn.cursor() as cur:
            yield cur


async def forget_mirror(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> None:
    """The mirror's bookkeeping of an erased user (its file goes with `Mirror.remove`)."""
    await cur.execute(f"DELETE FROM {MIRROR} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, user_id))


@dataclass(frozen=True, slots=True)
class MirrorDue:
    """A user whose latest version the mirror has not written yet, with what it last wrote
    (version, sha and the sha of an import it awaits; None: it never wrote the file)."""

    tenant_id: str
    user_id: str
    document: Document
    written: tuple[int, str, str | None] | None


async def mirrors_due(cur: AsyncCursor[Any], users: Sequence[tuple[str, str]]
                      ) -> list[MirrorDue]:
    """The users among `users` whose latest version is newer than their file, in one
    statement (a render batch's users, read together rather than two queries each)."""
    if not users:
        return []
    await cur.execute(
        f"""SELECT k.t, k.u, d.version, d.markdown, d.sha256, d.origin, d.cause_event_id,
                   m.written_version, m.written_sha, m.pending_sha
            FROM unnest(%s::text[], %s::text[]) AS k(t, u)
            CROSS JOIN LATERAL (
                SELECT version, markdown, sha256, origin, cause_event_id FROM {DOCUMENTS}
                WHERE tenant_id = k.t AND user_id = k.u ORDER BY version DESC LIMIT 1) d
            LEFT JOIN {MIRROR} m ON m.tenant_id = k.t AND m.user_id = k.u
            WHERE m.written_version IS NULL OR m.written_version < d.version
            ORDER BY k.t, k.u""",
        ([t for t, _ in users], [u for _, u in users]))
    return [MirrorDue(r[0], r[1], Document(int(r[2]), r[3], r[4], r[5], r[6]),
                      None if r[7] is None else (int(r[7]), r[8], r[9]))
            for r in await cur.fetchall()]


async def mirrors_written(cur: AsyncCursor[Any],
                          written: Sequence[tuple[str, str, int, str]]) -> None:
    """Record the files just written, (tenant, user, version, sha) each, in one statement."""
    if not written:
        return
    await cur.execute(
        f"""INSERT INTO {MIRROR} (tenant_id, user_id, written_version, written_sha)
            SELECT * FROM unnest(%s::text[], %s::text[], %s::int8[], %s::text[])
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET
              written_version = EXCLUDED.written_version,
              written_sha = EXCLUDED.written_sha, pending_sha = NULL""",
        ([w[0] for w in written], [w[1] for w in written], [w[2] for w in written],
         [w[3] for w in written]))
    await cur.connection.commit()


async def mirror_pending(cur: AsyncCursor[Any], tenant_id: str, user_id: str, sha: str
                         ) -> None:
    await cur.execute(f"UPDATE {MIRROR} SET pending_sha = %s "
                      "WHERE tenant_id = %s AND user_id = %s", (sha, tenant_id, user_id))
    await cur.connection.commit()
