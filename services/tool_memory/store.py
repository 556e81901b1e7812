"""The `tools` schema: the rules as they stand, and when each captured rule was first seen.

Tenant-wide rules are stored under the reserved user id `_tenant`, so every query for a user
reads two owners: the user and the tenant.

A user's rule is their own words ("Never email Sarah at sarah@example.com"), and its tags are
free labels anyone may set, so both are kept sealed with the user's column key
(habitus.crypto.columns): erasure destroys the key, and with it every copy of them in the heap,
the WAL and the backups. Nothing here filters on either in SQL (rules are found by id, which is
derived from the text, never by the text), so the statements stay as they were; rows are sealed
on the way in and opened on the way out. The tenant's own rules stay plain (`COLUMNS` leaves
`_tenant` alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor

from habitus.crypto.columns import COLUMNS
from habitus.ids import TENANT_WIDE

SCHEMA = "tools"
RULES = f"{SCHEMA}.rules"
#: capture's own memory of the rules it made: first seen, so a repeat keeps `created_at`; and
#: the edicts' tool and text (sealed), so the user's words can lift them (`Captured`)
CAPTURED = f"{SCHEMA}.captured"

PRIORITY_RANK = {"critical": 0, "high": 1, "normal": 2, "low": 3}
_COLUMNS = ("tenant_id, user_id, rule_id, tool_name, rule, priority, source, tags, scope, "
            "created_at, updated_at, causation")


@dataclass(frozen=True, slots=True)
class RuleRow:
    tenant_id: str
    user_id: str
    rule_id: str
    tool_name: str
    rule: str
    priority: str
    source: str
    tags: tuple[str, ...]
    scope: str
    created_at: float
    updated_at: float
    causation: str | None
    #: the rule's text as the column holds it (sealed for a user): what recall keys its cached
    #: embedding by, so erasure can drop it once the key that opens the text is gone
    stored_rule: str = ""

    @property
    def recall_key(self) -> str:
        return self.stored_rule or self.rule

    @property
    def sort_key(self) -> tuple[int, float, str, str]:
        """Critical first, then high, then normal; newest first; then stable."""
        return (PRIORITY_RANK.get(self.priority, 9), -self.updated_at, self.tool_name,
                self.rule_id)


def _row(r: Sequence[Any]) -> RuleRow:
    """A stored row with its rule and tags opened (`Shredded` once the owner's keys are gone)."""
    tenant_id, user_id = r[0], r[1]
    return RuleRow(tenant_id, user_id, r[2], r[3], COLUMNS.open(tenant_id, user_id, r[4]),
                   r[5], r[6], tuple(COLUMNS.open_all(tenant_id, user_id, r[7] or ())), r[8],
                   float(r[9]), float(r[10]), r[11], stored_rule=r[4])


def _sealed(row: RuleRow) -> tuple[Any, ...]:
    """The statement's parameters for `row`, its rule and tags sealed for its owner."""
    t, u = row.tenant_id, row.user_id
    return (t, u, row.rule_id, row.tool_name, COLUMNS.seal(t, u, row.rule), row.priority,
            row.source, COLUMNS.seal_all(t, u, row.tags), row.scope, row.created_at,
            row.updated_at, row.causation)


_UPSERT = f"""INSERT INTO {RULES} ({_COLUMNS})
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (tenant_id, user_id, rule_id) DO UPDATE SET
      tool_name = EXCLUDED.tool_name, rule = EXCLUDED.rule,
      priority = EXCLUDED.priority, source = EXCLUDED.source, tags = EXCLUDED.tags,
      scope = EXCLUDED.scope,
      updated_at = GREATEST({RULES}.updated_at, EXCLUDED.updated_at),
      causation = EXCLUDED.causation,
      created_at = LEAST({RULES}.created_at, EXCLUDED.created_at)"""


async def upsert_rules(cur: AsyncCursor[Any], rows: Sequence[RuleRow]) -> None:
    """Replace each rule, in order; `created_at` stays what it was when it was first stored,
    and `updated_at` never goes back (capture's times are the turns', the API's the
    service's)."""
    if rows:
        await cur.executemany(_UPSERT, [_sealed(row) for row in rows])


async def delete_rule(cur: AsyncCursor[Any], tenant_id: str, user_id: str, rule_id: str
                      ) -> None:
    await cur.execute(f"DELETE FROM {RULES} WHERE tenant_id = %s AND user_id = %s "
                      "AND rule_id = %s", (tenant_id, user_id, rule_id))


async def get_rule(cur: AsyncCursor[Any], tenant_id: str, user_id: str, rule_id: str
                   ) -> RuleRow | None:
    await cur.execute(f"SELECT {_COLUMNS} FROM {RULES} WHERE tenant_id = %s AND user_id = %s "
                      "AND rule_id = %s", (tenant_id, user_id, rule_id))
    row = await cur.fetchone()
    return None if row is None else _row(row)


async def stored_rules(cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> list[str]:
    """The user's rule texts as stored (sealed), unopened: what erasure hands recall to forget
    after the user's keys were destroyed."""
    await cur.execute(f"SELECT rule FROM {RULES} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, user_id))
    return [r[0] for r in await cur.fetchall()]


def owners(user_id: str | None) -> list[str]:
    """Whose rules a user sees: their own and the tenant's (the tenant's only, without one)."""
    return [TENANT_WIDE] if user_id is None else [user_id, TENANT_WIDE]


async def list_rules(cur: AsyncCursor[Any], tenant_id: str, user_ids: Iterable[str], *,
                     tool_name: str | None = None, priority: str | None = None
                     ) -> list[RuleRow]:
    sql = f"SELECT {_COLUMNS} FROM {RULES} WHERE tenant_id = %s AND user_id = ANY(%s)"
    params: list[Any] = [tenant_id, list(user_ids)]
    if tool_name is not None:
        sql += " AND tool_name = %s"
        params.append(tool_name)
    if priority is not None:
        sql += " AND priority = %s"
        params.append(priority)
    await cur.execute(sql, params)
    return sorted((_row(r) for r in await cur.fetchall()), key=lambda r: r.sort_key)


async def first_seen(cur: AsyncCursor[Any], keys: Iterable[tuple[str, str, str]]
                     ) -> dict[tuple[str, str, str], float]:
    """When capture first made each (tenant, user, rule id) it is about to publish again."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    await cur.execute(
        f"""SELECT c.tenant_id, c.user_id, c.rule_id, c.created_at FROM {CAPTURED} c
            JOIN unnest(%b::text[], %b::text[], %b::text[]) AS k(t, u, r)
              ON c.tenant_id = k.t AND c.user_id = k.u AND c.rule_id = k.r""",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[2] for k in wanted]))
    return {(r[0], r[1], r[2]): float(r[3]) for r in await cur.fetchall()}


@dataclass(frozen=True, slots=True)
class Captured:
    """What capture remembers of a rule it made: when first, its tool and text (sealed in the
    row), and whether the user's words may lift it (an edict: not a repeated failure)."""

    created_at: float
    tool_name: str
    rule: str
    liftable: bool


async def remember(cur: AsyncCursor[Any], made: Mapping[tuple[str, str, str], Captured]
                   ) -> None:
    """Keep what capture made; a rule made again keeps when it was first made."""
    if not made:
        return
    await cur.executemany(
        f"""INSERT INTO {CAPTURED} (tenant_id, user_id, rule_id, created_at, tool_name, rule,
                liftable)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, rule_id) DO UPDATE SET
              tool_name = EXCLUDED.tool_name, rule = EXCLUDED.rule,
              liftable = EXCLUDED.liftable""",
        [(t, u, r, c.created_at, c.tool_name, COLUMNS.seal(t, u, c.rule), c.liftable)
         for (t, u, r), c in made.items()])


async def liftable(cur: AsyncCursor[Any], users: Iterable[tuple[str, str]]
                   ) -> dict[tuple[str, str], dict[str, tuple[str, str]]]:
    """Each user's rules their words may lift: {(tenant, user): {rule id: (tool, text)}}, the
    text opened. A rule captured before capture kept its text (and not since found in the
    rules view) has none, and is not among them."""
    wanted = sorted(set(users))
    out: dict[tuple[str, str], dict[str, tuple[str, str]]] = {u: {} for u in wanted}
    if not wanted:
        return out
    await cur.execute(
        f"""SELECT c.tenant_id, c.user_id, c.rule_id, c.tool_name, c.rule FROM {CAPTURED} c
            JOIN unnest(%b::text[], %b::text[]) AS k(t, u)
              ON c.tenant_id = k.t AND c.user_id = k.u
            WHERE c.liftable AND c.rule IS NOT NULL
            ORDER BY c.created_at, c.rule_id""",
        ([w[0] for w in wanted], [w[1] for w in wanted]))
    for t, u, rule_id, tool, sealed in await cur.fetchall():
        out[(t, u)][rule_id] = (tool, COLUMNS.open(t, u, sealed))
    return out


async def forget(cur: AsyncCursor[Any], keys: Iterable[tuple[str, str, str]]) -> None:
    """Drop what capture remembered of rules the user's words lifted: said again, such a rule
    is new."""
    gone = sorted(set(keys))
    if gone:
        await cur.execute(
            f"""DELETE FROM {CAPTURED} c USING unnest(%b::text[], %b::text[], %b::text[])
                    AS k(t, u, r)
                WHERE c.tenant_id = k.t AND c.user_id = k.u AND c.rule_id = k.r""",
            ([k[0] for k in gone], [k[1] for k in gone], [k[2] for k in gone]))
