"""The body of every service's Alembic `env.py`.

Each service keeps its own migration history in its own schema (the version table lives there
too), so services migrate independently and never touch each other's tables. An advisory lock
serialises concurrent `habitus migrate` runs (replicas starting at once).
"""

from __future__ import annotations

import zlib

from alembic import context
from sqlalchemy import MetaData, create_engine, pool, text

from habitus.db.urls import sqlalchemy_url

MIGRATE_LOCK = zlib.crc32(b"habitus.migrate") & 0x7FFFFFFF


def run_migrations(schema: str, target_metadata: MetaData | None = None) -> None:
    config = context.config
    url = sqlalchemy_url(config.get_main_option("sqlalchemy.url") or "")
    if context.is_offline_mode():
        context.configure(
            url=url,
            target_metadata=target_metadata,
            version_table_schema=schema,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATE_LOCK})
        try:
            connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            connection.commit()
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                version_table_schema=schema,
                include_schemas=True,
                include_name=lambda name, type_, _: type_ != "schema" or name == schema,
            )
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATE_LOCK})
            connection.commit()
    engine.dispose()
