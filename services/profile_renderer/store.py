"""The `profile` schema: what PROFILE.md is rendered from, its versions, the mirror's state.

Every column holding the person's text is sealed with the user's column key
(habitus.crypto.columns): a facet's key and value, a not-yet-sure facet's key, value and each
line of its evidence, an account's label (an e-mail address), a rule's text and each rendered
PROFILE.md (their notes included). Erasing the user destroys the key, and with it every copy
Postgres still keeps in its heap, its WAL and its backups. Values are sealed here on the way
in and opened here on the way out, so the rest of the service only ever sees text; nothing
reads those columns in SQL but for equality (the facets' primary key), and whatever is
ordered is ordered in Python after opening. A document's `sha256` stays the hash of its text.
A tenant-wide rule (`TENANT_WIDE`) is the tenant's, not a person's: `COLUMNS` leaves it as it
is.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool
from pydantic_core import to_json

from habitus.context_cache import Stamp
from habitus.crypto.columns import COLUMNS
from habitus.crypto.keyring import Shredded
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


def opened_facet(tenant_id: str, user_id: str, row: Sequence[Any]) -> ProfileFacet:
    """A `facets` row (class, key, value, pinned, stability, origin) with its text opened."""
    return ProfileFacet(row[0], COLUMNS.open(tenant_id, user_id, row[1]),
                        COLUMNS.open(tenant_id, user_id, row[2]), bool(row[3]),
                        None if row[4] is None else float(row[4]), row[5])


def opened_provisional(tenant_id: str, user_id: str, row: Sequence[Any]) -> ProvisionalFacet:
    """A `provisional_facets` row (class, key, value, stability, evidence) with its text
    opened, each line of evidence too."""
    return ProvisionalFacet(row[0], COLUMNS.open(tenant_id, user_id, row[1]),
                            COLUMNS.open(tenant_id, user_id, row[2]), float(row[3]),
                            tuple(COLUMNS.open_all(tenant_id, user_id, row[4] or ())))


def opened_rule(tenant_id: str, row: Sequence[Any]) -> ToolRule:
    """A `tool_rules` row (rule_id, tool_name, rule, priority, updated_at, user_id) with its
    text opened under the row's own user (`TENANT_WIDE` for a tenant's rule, left as is)."""
    return ToolRule(row[0], row[1], COLUMNS.open(tenant_id, row[5], row[2]), row[3],
                    float(row[4]))


def opened_document(tenant_id: str, user_id: str, row: Sequence[Any]) -> Document:
    """A `documents` row (version, markdown, sha256, origin, cause_event_id), text opened."""
    return Document(int(row[0]), COLUMNS.open(tenant_id, user_id, row[1]), row[2], row[3],
                    row[4])


UserKey = tuple[str, str]


async def replace_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str,
                         facets: Sequence[ProfileFacet]) -> None:
    await replace_facets_of(cur, {(tenant_id, user_id): facets})


async def replace_facets_of(cur: AsyncCursor[Any],
                            facets: Mapping[UserKey, Sequence[ProfileFacet]]) -> None:
    """Each user's facets are now theirs in `facets` (each rebuild states the whole list): two
    statements for every user of a run, not two per user."""
    if not facets:
        return
    await _delete_users_rows(cur, FACETS, list(facets))
    rows = [(t, u, f) for (t, u), listed in facets.items() for f in listed]
    if rows:
        keys = [k for (t, u), listed in facets.items()
                for k in COLUMNS.seal_all(t, u, (f.key for f in listed))]
        values = [v for (t, u), listed in facets.items()
                  for v in COLUMNS.seal_all(t, u, (f.value for f in listed))]
        await cur.execute(
            f"""INSERT INTO {FACETS} (tenant_id, user_id, class, key, value, pinned, stability,
                    origin)
                SELECT t, u, c, k, v, p, s, o
                FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                            %b::bool[], %b::float8[], %b::text[]) AS x(t, u, c, k, v, p, s, o)""",
            ([t for t, _, _ in rows], [u for _, u, _ in rows],
             [f.facet_class for *_, f in rows], keys, values, [f.pinned for *_, f in rows],
             [f.stability for *_, f in rows], [f.origin for *_, f in rows]),
        )


async def _delete_users_rows(cur: AsyncCursor[Any], table: str, users: Sequence[UserKey]
                             ) -> None:
    await cur.execute(
        f"DELETE FROM {table} AS x USING unnest(%b::text[], %b::text[]) AS w(t, u) "
        "WHERE x.tenant_id = w.t AND x.user_id = w.u",
        ([t for t, _ in users], [u for _, u in users]))


async def load_facets(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                      ) -> list[ProfileFacet]:
    await cur.execute(f"SELECT class, key, value, pinned, stability, origin FROM {FACETS} "
                      "WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
    return [opened_facet(tenant_id, user_id, r) for r in await cur.fetchall()]


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
    return (await replace_provisional_of(cur, {(tenant_id, user_id): facets}))[
        (tenant_id, user_id)]


async def replace_provisional_of(cur: AsyncCursor[Any],
                                 facets: Mapping[UserKey, Sequence[ProvisionalFacet]]
                                 ) -> dict[UserKey, list[ProvisionalFacet]]:
    """`replace_provisional` for every user of a run, in two statements."""
    fresh = {user: strongest_per_key(listed) for user, listed in facets.items()}
    if not fresh:
        return fresh
    await _delete_users_rows(cur, PROVISIONAL, list(fresh))
    rows = [(t, u, f) for (t, u), listed in fresh.items() for f in listed]
    if rows:  # one statement, as for the facets; each evidence list travels as JSON
        keys = [k for (t, u), listed in fresh.items()
                for k in COLUMNS.seal_all(t, u, (f.key for f in listed))]
        values = [v for (t, u), listed in fresh.items()
                  for v in COLUMNS.seal_all(t, u, (f.value for f in listed))]
        evidence = [to_json(COLUMNS.seal_all(t, u, f.evidence)).decode() for t, u, f in rows]
        await cur.execute(
            f"""INSERT INTO {PROVISIONAL} (tenant_id, user_id, class, key, value, stability,
                    evidence)
                SELECT t, u, c, k, v, s, ARRAY(
                    SELECT item FROM jsonb_array_elements_text(e::jsonb) WITH ORDINALITY
                         AS i(item, n) ORDER BY n)
                FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                            %b::float8[], %b::text[]) AS x(t, u, c, k, v, s, e)""",
            ([t for t, _, _ in rows], [u for _, u, _ in rows],
             [f.facet_class for *_, f in rows], keys, values,
             [f.stability for *_, f in rows], evidence),
        )
    return fresh


async def load_provisional(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                           ) -> list[ProvisionalFacet]:
    await cur.execute(f"SELECT class, key, value, stability, evidence FROM {PROVISIONAL} "
                      "WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
    return [opened_provisional(tenant_id, user_id, r) for r in await cur.fetchall()]


async def upsert_account(cur: AsyncCursor[Any], tenant_id: str, user_id: str, toolkit: str,
                         connection_id: str, label: str) -> None:
    await cur.execute(
        f"""INSERT INTO {ACCOUNTS} (tenant_id, user_id, toolkit, connection_id, label)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, toolkit, connection_id)
            DO UPDATE SET label = EXCLUDED.label""",
        (tenant_id, user_id, toolkit, connection_id, COLUMNS.seal(tenant_id, user_id, label)))


async def load_accounts(cur: AsyncCursor[Any], tenant_id: str, user_id: str
                        ) -> list[tuple[str, str]]:
    """(toolkit, label) pairs, in that order (sorted here: the labels are sealed)."""
    return (await accounts_of(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


async def accounts_of(cur: AsyncCursor[Any], users: Sequence[UserKey]
                      ) -> dict[UserKey, list[tuple[str, str]]]:
    """Each user's (toolkit, label) pairs, in that order (sorted here: the labels are sealed),
    every user named in one statement."""
    distinct = list(dict.fromkeys(users))
    found: dict[UserKey, list[tuple[str, str]]] = {user: [] for user in distinct}
    if not distinct:
        return found
    await cur.execute(
        f"""SELECT a.tenant_id, a.user_id, a.toolkit, a.label
            FROM unnest(%b::text[], %b::text[]) AS w(t, u)
            JOIN {ACCOUNTS} AS a ON a.tenant_id = w.t AND a.user_id = w.u""",
        ([t for t, _ in distinct], [u for _, u in distinct]))
    for r in await cur.fetchall():
        found[(r[0], r[1])].append((r[2], COLUMNS.open(r[0], r[1], r[3])))
    return {user: sorted(pairs) for user, pairs in found.items()}


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
        (tenant_id, user_id, rule.rule_id, rule.tool_name,
         COLUMNS.seal(tenant_id, user_id, rule.rule), rule.priority, rule.updated_at, scope))


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
    return None if row is None else opened_document(tenant_id, user_id, row)


async def latest(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> Document | None:
    return (await latest_of(cur, [(tenant_id, user_id)]))[(tenant_id, user_id)]


async def latest_of(cur: AsyncCursor[Any], users: Sequence[UserKey]
                    ) -> dict[UserKey, Document | None]:
    """Each user's latest document (None: none yet), every user in one statement (an index
    lookup per user, newest version first)."""
    distinct = list(dict.fromkeys(users))
    found: dict[UserKey, Document | None] = dict.fromkeys(distinct)
    if not distinct:
        return found
    await cur.execute(
        f"""SELECT w.t, w.u, d.version, d.markdown, d.sha256, d.origin, d.cause_event_id
            FROM unnest(%b::text[], %b::text[]) AS w(t, u)
            CROSS JOIN LATERAL (
              SELECT version, markdown, sha256, origin, cause_event_id FROM {DOCUMENTS}
              WHERE tenant_id = w.t AND user_id = w.u ORDER BY version DESC LIMIT 1) AS d""",
        ([t for t, _ in distinct], [u for _, u in distinct]))
    for r in await cur.fetchall():
        found[(r[0], r[1])] = opened_document(r[0], r[1], r[2:])
    return found


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
    """Store a version (its text sealed); returns the sha256 of the text, not of the sealed
    value: the hash the mirror compares its file with and `ProfileRendered` announces."""
    versions = NewVersions()
    digest = versions.add(tenant_id, user_id, version, markdown, origin, cause_event_id,
                          blocks_changed)
    await versions.flush(cur)
    return digest


class NewVersions:
    """Versions to store, gathered and inserted in one statement (`flush`): a run of renders
    stores its versions together, not one round trip each."""

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, int, str, str, str, str, str]] = []

    def add(self, tenant_id: str, user_id: str, version: int, markdown: str, origin: str,
            cause_event_id: str, blocks_changed: Sequence[str]) -> str:
        """Gather a version; returns the sha256 of its text (as `add_version`)."""
        digest = sha256(markdown)
        self._rows.append((tenant_id, user_id, version,
                           COLUMNS.seal(tenant_id, user_id, markdown), digest, origin,
                           cause_event_id, to_json(list(blocks_changed)).decode()))
        return digest

    async def flush(self, cur: AsyncCursor[Any]) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        await cur.execute(
            f"""INSERT INTO {DOCUMENTS} (tenant_id, user_id, version, markdown, sha256, origin,
                    cause_event_id, blocks_changed)
                SELECT t, u, v, m, h, o, c, ARRAY(
                    SELECT item FROM jsonb_array_elements_text(b::jsonb) WITH ORDINALITY
                         AS i(item, n) ORDER BY n)
                FROM unnest(%b::text[], %b::text[], %b::int4[], %b::text[], %b::text[],
                            %b::text[], %b::text[], %b::text[]) AS x(t, u, v, m, h, o, c, b)""",
            tuple([r[i] for r in rows] for i in range(8)))


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
                                                     updated_at, user_id)), '[]')
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
    # opened here, out of the statement: the values are sealed (the rules each under their
    # own row's user, which is the caller's or the tenant's)
    t, u = tenant_id, user_id
    return ContextInputs(
        stamp=Stamp(int(stamp or 0), int(tenant_stamp or 0)),
        facets=[opened_facet(t, u, f) for f in facets],
        document=None if document is None else (int(document[0]),
                                                COLUMNS.open(t, u, str(document[1]))),
        rules=[opened_rule(t, r) for r in rules],
        provisional=[opened_provisional(t, u, f) for f in provisional or ()],
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
    statement (a render batch's users, read together rather than two queries each). A user
    whose keys were destroyed meanwhile (an erasure racing the batch) is left out: their
    file goes with the erasure, and the others are still written."""
    if not users:
        return []
    await cur.execute(
        f"""SELECT k.t, k.u, d.version, d.markdown, d.sha256, d.origin, d.cause_event_id,
                   m.written_version, m.written_sha, m.pending_sha
            FROM unnest(%b::text[], %b::text[]) AS k(t, u)
            CROSS JOIN LATERAL (
                SELECT version, markdown, sha256, origin, cause_event_id FROM {DOCUMENTS}
                WHERE tenant_id = k.t AND user_id = k.u ORDER BY version DESC LIMIT 1) d
            LEFT JOIN {MIRROR} m ON m.tenant_id = k.t AND m.user_id = k.u
            WHERE m.written_version IS NULL OR m.written_version < d.version
            ORDER BY k.t, k.u""",
        ([t for t, _ in users], [u for _, u in users]))
    due: list[MirrorDue] = []
    for r in await cur.fetchall():
        try:
            document = opened_document(r[0], r[1], r[2:7])
        except Shredded:
            continue
        due.append(MirrorDue(r[0], r[1], document,
                             None if r[7] is None else (int(r[7]), r[8], r[9])))
    return due


async def mirrors_written(cur: AsyncCursor[Any],
                          written: Sequence[tuple[str, str, int, str]]) -> None:
    """Record the files just written, (tenant, user, version, sha) each, in one statement."""
    if not written:
        return
    await cur.execute(
        f"""INSERT INTO {MIRROR} (tenant_id, user_id, written_version, written_sha)
            SELECT * FROM unnest(%b::text[], %b::text[], %b::int8[], %b::text[])
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
