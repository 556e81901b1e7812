"""Migrations: one shared Alembic environment, frozen revision files, idempotent `migrate`.

Each database test migrates a throwaway database created on the session's Postgres, so it starts
from nothing and leaves the shared database alone.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import tomllib
import uuid
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from habitus.db.migrate import ENVIRONMENT, alembic_config, current_revision
from habitus.db.urls import conninfo
from habitus.service.migrations import migrate, sources

REPO = Path(__file__).resolve().parents[2]
SERVICE_MIGRATIONS = sorted(REPO.glob("services/*/migrations"))
REVISION_FILES = sorted(REPO.glob("services/*/migrations/versions/*.py"))
# what a frozen revision may import: Alembic's `op` and typing, nothing that can change under it
ALLOWED_IMPORTS = {"__future__", "alembic", "typing"}

Snapshot = list[tuple[object, ...]]


def heads() -> dict[str, str | None]:
    return {
        schema: ScriptDirectory.from_config(
            alembic_config("postgresql://unused/x", schema, location)).get_current_head()
        for schema, location in sources().items()
    }


def snapshot(url: str, schemas: list[str]) -> Snapshot:
    """Tables, columns (types, defaults, nullability), indexes, constraints and the recorded
    revisions of `schemas`."""
    with psycopg.connect(conninfo(url)) as conn:
        rows: Snapshot = []
        rows += conn.execute(
            "SELECT 'column', table_schema, table_name, ordinal_position, column_name, "
            "data_type, udt_name, character_maximum_length, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = ANY(%s) "
            "ORDER BY 2, 3, 4", (schemas,)).fetchall()
        rows += conn.execute(
            "SELECT 'index', schemaname, tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = ANY(%s) ORDER BY 2, 3, 4", (schemas,)).fetchall()
        rows += conn.execute(
            "SELECT 'constraint', n.nspname, c.conrelid::regclass::text, c.conname, c.contype, "
            "pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = ANY(%s) "
            "ORDER BY 2, 3, 4", (schemas,)).fetchall()
        for schema in schemas:
            rows += [("revision", schema, *row) for row in conn.execute(
                f'SELECT version_num FROM "{schema}".alembic_version').fetchall()]
        return rows


def tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(conninfo(url)) as conn:
        return {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,)).fetchall()}


# -- layout: one environment, revision files only ---------------------------------------------

def test_every_service_registers_the_migrations_under_services() -> None:
    assert SERVICE_MIGRATIONS, "no services/*/migrations found"
    registered = {location.resolve() for location in sources().values()}
    assert registered == {location.resolve() for location in SERVICE_MIGRATIONS}


@pytest.mark.parametrize("location", SERVICE_MIGRATIONS, ids=lambda p: p.parent.name)
def test_a_service_keeps_only_its_revision_files(location: Path) -> None:
    assert not (location / "env.py").exists(), "the environment is habitus/db/alembic/env.py"
    assert not list(location.rglob("*.mako")), "the template is habitus/db/alembic/"
    kept = {p.name for p in location.iterdir() if p.name != "__pycache__"}
    assert kept == {"__init__.py", "versions"}
    assert list((location / "versions").glob("*.py"))


def test_the_shared_environment_is_package_data() -> None:
    assert (ENVIRONMENT / "env.py").is_file() and (ENVIRONMENT / "script.py.mako").is_file()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]
    package = REPO / "libs" / "habitus"
    for path in (ENVIRONMENT / "env.py", ENVIRONMENT / "script.py.mako"):
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns["habitus"]), relative
    for path in REVISION_FILES:
        relative = path.relative_to(path.parents[2]).as_posix()  # migrations/versions/x.py
        assert any(fnmatch.fnmatch(relative, p) for p in patterns["*"]), relative


@pytest.mark.parametrize("path", REVISION_FILES, ids=lambda p: f"{p.parents[2].name}/{p.name}")
def test_a_revision_is_frozen_it_imports_nothing_that_can_change(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            modules = [node.module or ""]
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            assert name not in {"__import__", "import_module"}, f"{path.name}: dynamic import"
            continue
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            assert top not in {"habitus", "services", "tests"}, f"{path.name} imports {module}"
            assert top in ALLOWED_IMPORTS, f"{path.name} imports {module}"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "sa" not in names, f"{path.name}: literal SQL only"


# -- against a real, fresh database -----------------------------------------------------------

def test_migrate_twice_reaches_head_then_changes_nothing(fresh_database: str) -> None:
    expected = heads()
    schemas = sorted(expected)

    first = migrate(fresh_database)
    assert {r.schema: (r.before, r.after) for r in first} == {
        schema: (None, head) for schema, head in expected.items()}
    after_first = snapshot(fresh_database, schemas)

    second = migrate(fresh_database)
    assert {r.schema: (r.before, r.after) for r in second} == {
        schema: (head, head) for schema, head in expected.items()}
    assert snapshot(fresh_database, schemas) == after_first
    for schema, head in expected.items():
        assert current_revision(fresh_database, schema) == head
        assert "alembic_version" in tables(fresh_database, schema)  # in the service's schema


def test_only_migrates_the_schemas_asked_for(fresh_database: str) -> None:
    results = migrate(fresh_database, only=["producers"])
    assert [r.schema for r in results] == ["producers"]
    assert current_revision(fresh_database, "gateway") is None
    assert tables(fresh_database, "gateway") == set()


def test_downgrade_to_base_and_back_gives_the_same_schema(fresh_database: str) -> None:
    migrate(fresh_database)
    schemas = sorted(sources())
    migrated = snapshot(fresh_database, schemas)
    for schema, location in sources().items():
        command.downgrade(alembic_config(fresh_database, schema, location), "base")
        assert tables(fresh_database, schema) == {"alembic_version"}
        assert current_revision(fresh_database, schema) is None
    migrate(fresh_database)
    assert snapshot(fresh_database, schemas) == migrated


def test_offline_mode_renders_the_sql_in_the_services_schema() -> None:
    for schema, location in sources().items():
        cfg = alembic_config("postgresql://unused/x", schema, location)
        cfg.output_buffer = io.StringIO()
        command.upgrade(cfg, "head", sql=True)
        sql = cfg.output_buffer.getvalue()
        assert f"CREATE TABLE {schema}.alembic_version" in sql
        assert sql.rstrip().endswith("COMMIT;")


def test_a_migrations_folder_outside_the_entry_points(fresh_database: str,
                                                      tmp_path: Path) -> None:
    """A service not registered anywhere: its migrations folder given as a plain path (with a
    space in it), run in the shared environment, version table in its own schema."""
    schema = f"example_{uuid.uuid4().hex[:8]}"
    location = tmp_path / "an example" / "migrations"
    (location / "versions").mkdir(parents=True)
    (location / "versions" / "0001_things.py").write_text(
        '"""Things."""\n\nfrom alembic import op\n\nrevision = "0001"\ndown_revision = None\n'
        "branch_labels = None\ndepends_on = None\n\n\ndef upgrade() -> None:\n"
        f'    op.execute("CREATE TABLE {schema}.things (id bigint PRIMARY KEY)")\n\n\n'
        "def downgrade() -> None:\n"
        f'    op.execute("DROP TABLE {schema}.things")\n')

    cfg = alembic_config(fresh_database, schema, location)
    command.upgrade(cfg, "head")
    command.upgrade(alembic_config(fresh_database, schema, location), "head")
    assert current_revision(fresh_database, schema) == "0001"
    assert tables(fresh_database, schema) == {"alembic_version", "things"}
    assert ScriptDirectory.from_config(cfg).get_current_head() == "0001"


def test_a_folder_without_versions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        alembic_config("postgresql://unused/x", "nothing", tmp_path)
