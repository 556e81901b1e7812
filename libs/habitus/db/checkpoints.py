"""Projection checkpoints: the stream position written in the same transaction as the view.

A row per projection in the owning service's schema. `emitted_seq` remembers how far the
projection's consequences (events it emitted) were published, so a replay rebuilds the view
without publishing them a second time. `epoch` fences writers: whoever claims the
projection bumps it, and a batch commits only if the epoch it started with is still current, so
a stale replica (or one that lost its lock) can never commit behind a newer one.
"""

from __future__ import annotations

import re

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def checkpoint_table(schema: str) -> str:
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return f"{schema}.projection_checkpoints"


def checkpoint_ddl(schema: str) -> list[str]:
    table = checkpoint_table(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {table} (
            projection text PRIMARY KEY,
            last_seq bigint NOT NULL DEFAULT 0,
            epoch bigint NOT NULL DEFAULT 0,
            emitted_seq bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )""",
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS emitted_seq bigint NOT NULL DEFAULT 0",
    ]
