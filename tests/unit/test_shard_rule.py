"""The shard-readiness rule (habitus.db.sharding.violations) over table shapes."""

from __future__ import annotations

from habitus.db.sharding import LOCAL_TABLES, TableShape, UniqueIndex, local_reason, violations


def _table(name: str, columns: set[str], *unique: UniqueIndex) -> TableShape:
    schema, table = name.split(".")
    return TableShape(schema, table, frozenset(columns), unique)


def test_the_rule_names_each_table_that_breaks_it() -> None:
    pk = UniqueIndex("t_pkey", ("tenant_id", "user_id", "id"), primary=True)
    found = violations([
        _table("habits.fine", {"tenant_id", "user_id", "id"}, pk),
        _table("habits.by_id", {"tenant_id", "id"}, UniqueIndex("by_id_pkey", ("id",), True)),
        _table("habits.side", {"tenant_id", "id", "email"}, pk,
               UniqueIndex("side_email", ("email",), primary=False)),
        _table("habits.heap", {"tenant_id", "id"}),
        _table("habits.lookup", {"id", "value"}, UniqueIndex("lookup_pkey", ("id",), True)),
        _table("gateway.api_keys", {"key_hash", "tenant_id"},
               UniqueIndex("k", ("key_hash",), True)),
        _table("learning.projection_checkpoints", {"projection"},
               UniqueIndex("c", ("projection",), True)),
    ])
    assert found == [
        "habits.by_id: primary key by_id_pkey (id) lacks tenant_id",
        "habits.side: unique index side_email (email) lacks tenant_id",
        "habits.heap: no primary key",
        "habits.lookup: no tenant_id column, and not declared in "
        "habitus.db.sharding.LOCAL_TABLES",
    ]


def test_every_local_table_says_why() -> None:
    assert local_reason("gateway.api_keys") is not None
    assert local_reason("traces.projection_checkpoints") is not None
    assert local_reason("gateway.api_keys_archive") is None
    assert all(len(reason) > 20 for reason in LOCAL_TABLES.values())
