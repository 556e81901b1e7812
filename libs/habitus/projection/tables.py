"""The tables beside every projection's view, by name, and the statements that make them.

Each schema that holds projections has four: `projection_checkpoints` (one row per partition of
each projection), `projection_members` (the service's replicas and their leases),
`applied_events` and `dead_letters`. Their statements are `CheckpointStore`'s
(`habitus.projection.checkpoints`); here are only their names and their shapes, which the
services' migrations freeze and tests' throwaway schemas create.
"""

from __future__ import annotations

import re

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def schema_name(schema: str) -> str:
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return schema


def checkpoint_table(schema: str) -> str:
    return f"{schema_name(schema)}.projection_checkpoints"


def members_table(schema: str) -> str:
    return f"{schema_name(schema)}.projection_members"


def applied_table(schema: str) -> str:
    return f"{schema_name(schema)}.applied_events"


def dead_letter_table(schema: str) -> str:
    return f"{schema_name(schema)}.dead_letters"


def checkpoint_ddl(schema: str) -> list[str]:
    """The checkpoint and membership tables of a new schema (idempotent statements)."""
    table = checkpoint_table(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {table} (
            projection text NOT NULL,
            parts smallint NOT NULL DEFAULT 1,
            part smallint NOT NULL DEFAULT 0,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            state text NOT NULL DEFAULT 'active',
            cutover_seq bigint,
            owner text,
            PRIMARY KEY (projection, parts, part)
        )""",
        *membership_ddl(schema),
    ]


def membership_ddl(schema: str) -> list[str]:
    """The replicas of the schema's service that share its partitions, with their leases."""
    return [f"""CREATE TABLE IF NOT EXISTS {members_table(schema)} (
            member text PRIMARY KEY,
            host text NOT NULL DEFAULT '',
            pid integer NOT NULL DEFAULT 0,
            joined_at timestamptz NOT NULL DEFAULT now(),
            lease_until timestamptz NOT NULL
        )"""]


def partitions_migration(schema: str) -> list[str]:
    """What a schema made before partitions needs (each service's `partitions` migration
    holds these statements, frozen): the checkpoint keyed by partition, the membership table.
    Existing checkpoints become partition 0 of 1."""
    table = checkpoint_table(schema)
    return [
        f"""ALTER TABLE {table}
        ADD COLUMN parts smallint NOT NULL DEFAULT 1,
        ADD COLUMN part smallint NOT NULL DEFAULT 0,
        ADD COLUMN state text NOT NULL DEFAULT 'active',
        ADD COLUMN cutover_seq bigint,
        ADD COLUMN owner text""",
        f"""ALTER TABLE {table}
        DROP CONSTRAINT projection_checkpoints_pkey,
        ADD CONSTRAINT projection_checkpoints_pkey PRIMARY KEY (projection, parts, part)""",
        *membership_ddl(schema),
    ]


def tracking_ddl(schema: str) -> list[str]:
    """The applied-ids and dead-letter tables (idempotent statements)."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {applied_table(schema)} (
            projection text NOT NULL,
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            event_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (projection, tenant_id, user_id, event_id)
        )""",
        # whose event it was (from the subject when the event itself could not be read; ''
        # when not even that names a tenant), so erasing a user erases their dead letters'
        # records too; the tenant leads the key, as in every table holding a tenant's data
        f"""CREATE TABLE IF NOT EXISTS {dead_letter_table(schema)} (
            tenant_id text NOT NULL DEFAULT '',
            projection text NOT NULL,
            seq bigint NOT NULL,
            event_id text,
            reason text NOT NULL,
            detail text NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now(),
            user_id text,
            PRIMARY KEY (tenant_id, projection, seq)
        )""",
        f"""CREATE INDEX IF NOT EXISTS dead_letters_by_seq
            ON {dead_letter_table(schema)} (projection, seq)""",
    ]
