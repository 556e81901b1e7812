"""`habitus migrate`: apply every service's migrations, idempotently.

Services register their migration package under the `habitus.migrations` entry-point group,
named after the schema they own.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool

from habitus.db.urls import sqlalchemy_url

log = logging.getLogger(__name__)
GROUP = "habitus.migrations"


@dataclass(frozen=True, slots=True)
class MigrationResult:
    schema: str
    before: str | None
    after: str | None


def sources() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for ep in entry_points(group=GROUP):
        module = importlib.import_module(ep.value)
        assert module.__file__ is not None
        found[ep.name] = Path(module.__file__).parent
    return dict(sorted(found.items()))


def alembic_config(database_url: str, schema: str, location: Path) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(location))
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


def migrate(database_url: str, only: list[str] | None = None) -> list[MigrationResult]:
    results = []
    for schema, location in sources().items():
        if only and schema not in only:
            continue
        before = current_revision(database_url, schema)
        command.upgrade(alembic_config(database_url, schema, location), "head")
        after = current_revision(database_url, schema)
        results.append(MigrationResult(schema, before, after))
        log.info("migrated", extra={"schema": schema, "from": before, "to": after})
    return results
