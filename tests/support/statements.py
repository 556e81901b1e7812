"""Counting the statements a piece of code sends (each one a round trip to Postgres)."""

from __future__ import annotations

from typing import Any

import psycopg


class CountingCursor(psycopg.AsyncCursor[Any]):
    """A cursor that counts the statements it sends."""

    statements = 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return await super().execute(*args, **kwargs)
