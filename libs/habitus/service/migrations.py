"""`habitus migrate`: apply every installed service's migrations, idempotently.

Each service's descriptor names the schema it owns and its migrations package; this module
turns the installed descriptors into (schema, folder) pairs and has `habitus.db.migrate`
upgrade each. It sits with the services, not with the database helpers, because "every
service" is the registry's to say.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from habitus.db.migrate import MigrationResult, upgrade
from habitus.service.registry import services


def sources() -> dict[str, Path]:
    """Each installed service's schema and migrations folder, from its descriptor."""
    found: dict[str, Path] = {}
    for descriptor in services():
        if descriptor.migrations is None or descriptor.schema is None:
            continue
        module = importlib.import_module(descriptor.migrations)
        assert module.__file__ is not None
        found[descriptor.schema] = Path(module.__file__).parent
    return dict(sorted(found.items()))


def migrate(database_url: str, only: list[str] | None = None) -> list[MigrationResult]:
    """Upgrade every installed service's schema (or those in `only`) to its head."""
    return [upgrade(database_url, schema, location)
            for schema, location in sources().items() if not only or schema in only]
