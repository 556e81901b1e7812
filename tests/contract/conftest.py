"""The contract's database: every installed service migrated, and the example service (not
installed, so `habitus migrate` does not know it) migrated from its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command

from habitus.db.migrate import alembic_config
from habitus.service.migrations import migrate
from tests.conftest import ServerUrls

EXAMPLE_MIGRATIONS = Path(__file__).resolve().parents[1] / "support" / "example_service" / \
    "migrations"


@pytest.fixture(scope="session")
def migrated(servers: ServerUrls) -> None:
    migrate(servers.database)
    command.upgrade(alembic_config(servers.database, "example", EXAMPLE_MIGRATIONS), "head")
