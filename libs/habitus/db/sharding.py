"""Ready to shard by tenant: the rule every table follows, and the check that holds it.

A sharded Postgres (Citus, or any scheme that places rows by a distribution column) can only
enforce a primary key or a unique index that contains the distribution column, and can only keep
a tenant's rows together, and its joins local, if every table holding them carries that column.
Habitus distributes on `tenant_id`: every table with a tenant's data has it in its primary key
and in every unique index. The few tables that hold no tenant's data are named here with the
reason (a reference table may name tenants, as the API keys do, and is copied whole to every
node), so a new table has to choose: a tenant in its key, or a line in `LOCAL_TABLES`.

`violations` is the rule as a pure function over table shapes; `table_shapes` reads them from the
catalog of a migrated database (tests/integration/test_shard_ready.py runs both).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

#: the column a sharded deployment distributes every tenant's table on
DISTRIBUTION_COLUMN = "tenant_id"

#: tables outside the rule (`schema.table`, glob patterns: reference tables every node holds
#: whole, and coordination state), and why each may be
LOCAL_TABLES: dict[str, str] = {
    "gateway.api_keys": (
        "a reference table (copied to every node): a request is resolved to its tenant by its "
        "key before anyone knows which shard holds the tenant"),
    "*.projection_checkpoints": (
        "a projection's position in its stream and the epoch that fences its writers: "
        "coordination state of the deployment, not a tenant's data"),
    "*.projection_members": (
        "the service's replicas and their leases (who shares the projections' partitions): "
        "coordination state of the deployment"),
    "*.alembic_version": "the schema's migration revision",
}


@dataclass(frozen=True)
class UniqueIndex:
    name: str
    columns: tuple[str, ...]
    primary: bool


@dataclass(frozen=True)
class TableShape:
    schema: str
    name: str
    columns: frozenset[str]
    unique: tuple[UniqueIndex, ...]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def local_reason(qualified: str) -> str | None:
    """Why `schema.table` may hold no tenant column, or None if it must have one."""
    for pattern, reason in LOCAL_TABLES.items():
        if fnmatch.fnmatchcase(qualified, pattern):
            return reason
    return None


def violations(tables: Iterable[TableShape]) -> list[str]:
    """Every way `tables` break the rule, one sentence each (empty when they keep it)."""
    out: list[str] = []
    for table in tables:
        if local_reason(table.qualified) is not None:
            continue
        if DISTRIBUTION_COLUMN not in table.columns:
            out.append(f"{table.qualified}: no {DISTRIBUTION_COLUMN} column, and not "
                       "declared in habitus.db.sharding.LOCAL_TABLES")
            continue
        if not any(index.primary for index in table.unique):
            out.append(f"{table.qualified}: no primary key")
        for index in table.unique:
            if DISTRIBUTION_COLUMN not in index.columns:
                kind = "primary key" if index.primary else "unique index"
                out.append(f"{table.qualified}: {kind} {index.name} "
                           f"({', '.join(index.columns)}) lacks {DISTRIBUTION_COLUMN}")
    return out


_SHAPES = """
SELECT n.nspname, c.relname,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
       ARRAY(SELECT json_build_object(
                      'name', i.relname::text, 'primary', x.indisprimary,
                      'columns', ARRAY(SELECT coalesce(a.attname::text, '(expression)')
                                         FROM unnest(x.indkey) WITH ORDINALITY AS k(att, ord)
                                         LEFT JOIN pg_attribute a
                                           ON a.attrelid = c.oid AND a.attnum = k.att
                                        ORDER BY k.ord))
              FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
             WHERE x.indrelid = c.oid AND x.indisunique)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname = ANY(%s)
 ORDER BY 1, 2
"""


async def table_shapes(conn: AsyncConnection[Any], schemas: Sequence[str]
                       ) -> list[TableShape]:
    """The tables of `schemas` with their columns and unique indexes, from the catalog."""
    cur = await conn.execute(_SHAPES, (list(schemas),))
    return [
        TableShape(schema, name, frozenset(columns), tuple(
            UniqueIndex(index["name"], tuple(index["columns"]), bool(index["primary"]))
            for index in indexes))
        for schema, name, columns, indexes in await cur.fetchall()
    ]
