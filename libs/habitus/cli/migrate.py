"""`habitus migrate`: every installed service's migrations, applied (idempotent)."""

from __future__ import annotations

from typing import Annotated

import typer

from habitus.cli.connect import live_settings, need
from habitus.cli.output import console


def migrate(only: Annotated[list[str] | None, typer.Option(help="schemas to migrate")] = None
            ) -> None:
    """Apply every service's migrations (idempotent)."""
    from habitus.service.migrations import migrate as run_migrate

    settings = live_settings()
    for r in run_migrate(need(settings.database_url, "DATABASE_URL"), only):
        console.print(f"{r.schema}: {r.before or 'empty'} -> {r.after}")
