"""The psycopg 3 async pool every service uses for its projections and queries."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from habitus.db.urls import conninfo


async def open_pool(url: str, min_size: int = 1, max_size: int = 10, name: str = "habitus"
                    ) -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        conninfo(url),
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        timeout=10.0,
        kwargs={"autocommit": False, "application_name": name},
    )
    await pool.open(wait=True, timeout=30.0)
    return pool
