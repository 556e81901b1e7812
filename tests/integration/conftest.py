"""Fixtures of the integration tests that need more than the session's servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from habitus.db.urls import conninfo
from tests.conftest import ServerUrls


@pytest.fixture
def fresh_database(servers: ServerUrls) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped afterwards)."""
    name = f"habitus_migrations_{uuid.uuid4().hex[:12]}"
    admin = conninfo(servers.database)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
