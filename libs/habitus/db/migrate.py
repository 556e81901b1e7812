"""Migrating one schema: its revision files in the one shared Alembic environment.

A service's migrations are only its revision files (`<package>/versions/*.py`, literal SQL,
frozen); they all run in the one shared Alembic environment, `habitus/db/alembic/` (`env.py`,
`script.py.mako`), with the version table in the service's own schema.

Which schemas there are, and where their revisions live, is the services' to say (their
descriptors): `habitus migrate` applies every one of them with `habitus.service.migrations`,
which calls `upgrade` here per schema. This module knows no service, so the storage layer stays
below the layer that describes services.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool

from habitus.db.urls import sqlalchemy_url

log = logging.getLogger(__name__)
ENVIRONMENT = Path(__file__).resolve().parent / "alembic"


@dataclass(frozen=True, slots=True)
class MigrationResult:
    schema: str
    before: str | None
    after: str | None


def versions_dir(location: Path) -> Path:
    """The revision files of a service whose migrations package (or plain folder) is
    `location`: its `versions/` folder."""
    versions = Path(location) / "versions"
    if not versions.is_dir():
        raise FileNotFoundError(f"no migrations in {location}: {versions} is not a directory")
    return versions.resolve()


def alembic_config(database_url: str, schema: str, location: Path) -> Config:
    """Alembic's configuration for migrating `schema` with the revisions under
    `location/versions`, in the shared environment. `location` is the service's migrations
    package directory, or any folder laid out the same way."""
    cfg = Config()
    cfg.set_main_option("script_location", str(ENVIRONMENT).replace("%", "%%"))
    # one location; "newline" so a space (or colon) in the path is never taken for a separator
    cfg.set_main_option("path_separator", "newline")
    cfg.set_main_option("version_locations", str(versions_dir(location)).replace("%", "%%"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["schema"] = schema
    return cfg


def current_revision(database_url: str, schema: str) -> str | None:
    engine = create_engine(sqlalchemy_url(database_url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table_schema": schema})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def upgrade(database_url: str, schema: str, location: Path) -> MigrationResult:
    """Bring `schema` to the head of the revisions under `location/versions` (idempotent)."""
    before = current_revision(database_url, schema)
    command.upgrade(alembic_config(database_url, schema, location), "head")
    after = current_revision(database_url, schema)
    log.info("migrated", extra={"schema": schema, "from": before, "to": after})
    return MigrationResult(schema, before, after)
