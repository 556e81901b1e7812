"""The shared Alembic `env.py`: migrate one service's schema.

The schema comes from the caller (`config.attributes["schema"]`, set by
`habitus.db.migrate.alembic_config`; `-x schema=...` on Alembic's own command line), so every
service runs this same environment. Its version table lives in that schema. Online and offline
(`--sql`) modes are handled by `habitus.db.alembic_env.run_migrations`: offline renders SQL with
literal binds; online takes an advisory lock, creates the schema if needed and applies the
revisions in one transaction.

`config.attributes["target_metadata"]` (optional) is the service's SQLAlchemy metadata, for
autogenerate only.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import MetaData

from habitus.db.alembic_env import run_migrations


def _schema() -> str:
    schema = context.config.attributes.get("schema") or context.get_x_argument(
        as_dictionary=True).get("schema")
    if not schema:
        raise RuntimeError("no schema to migrate: set config.attributes['schema'] "
                           "(habitus.db.migrate.alembic_config) or pass -x schema=NAME")
    return str(schema)


def _metadata() -> MetaData | None:
    metadata = context.config.attributes.get("target_metadata")
    return metadata if isinstance(metadata, MetaData) else None


run_migrations(_schema(), _metadata())
