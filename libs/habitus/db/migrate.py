"""`habitus migrate`: apply every service's migrations, idempotently.

Each service's descriptor names its migrations package and the schema it owns. A service's
migrations are only its revision files (`<package>/versions/*.py`, literal SQL, frozen); they
all run in the one shared Alembic environment, `habitus/db/alembic/` (`env.py`,
`script.py.mako`), with the version table in the service's own schema.
"""

from __future__ import annotations

import importlib
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


def sources() -> dict[str, Path]:
    """Each installed service's schema and migrations folder, from its descriptor."""
    from habitus.service.registry import services

    found: dict[str, Path] = {}
    for descriptor in services():
        if descriptor.migrations is None or descriptor.schema is None:
            continue
        module = importlib.import_module(descriptor.migrations)
        assert module.__file__ is not None
        found[descriptor.schema] = Path(module.__file__).parent
    return dict(sorted(found.items()))


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
