"""`habitus replay <projection>`: drop a projection's tables and rebuild them from stream
sequence 1 (here, or by the running service that holds the projection)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from habitus.cli.connect import live_settings, need
from habitus.cli.gateway import fail
from habitus.cli.output import console


def replay(
    projection: str,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the rebuild")] = 600.0,
    force: Annotated[bool, typer.Option(help="rebuild even if the stream lost old events")
                     ] = False,
) -> None:
    """Drop a projection's tables and rebuild them from stream sequence 1."""
    from habitus.bus import connect
    from habitus.crypto.setup import keyring_from
    from habitus.db.pool import open_pool
    from habitus.events.catalog import install_keyring_once
    from habitus.projection.replay import replay as run_replay
    from habitus.service.projections import resolve

    settings = live_settings()
    # the projection runs here: it opens users' sealed payloads with the deployment's keys
    install_keyring_once(lambda: keyring_from(settings))
    try:
        proj = resolve(projection)
    except (LookupError, TypeError, ImportError) as exc:
        raise fail(str(exc)) from None

    async def go() -> Any:
        nc = await connect(need(settings.nats_url, "NATS_URL"), "habitus-replay")
        pool = await open_pool(need(settings.database_url, "DATABASE_URL"), name="replay")
        try:
            return await run_replay(proj, nc, pool, timeout=timeout, force=force)
        finally:
            await pool.close()
            await nc.drain()

    from habitus.projection.replay import IncompleteHistory

    try:
        result = asyncio.run(go())
    except IncompleteHistory as exc:
        raise fail(str(exc)) from None
    if result.rebuilt_here:
        console.print(f"{proj.name}: rebuilt up to stream sequence {result.checkpoint}")
    else:
        console.print(f"{proj.name}: reset; the running service holds it and is rebuilding")
