"""`habitus erase`: everything of one user, erased through the gateway's `admin.erase_user` on
the bus (every view, cache and mirror file, and the user's messages in the streams)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from habitus.cli.connect import live_settings, need
from habitus.cli.gateway import fail
from habitus.cli.output import console


def erase(
    tenant: Annotated[str, typer.Option(help="the user's tenant")],
    user: Annotated[str, typer.Option(help="the user to erase")],
    reason: Annotated[str | None, typer.Option(help="why, for the audit trail")] = None,
) -> None:
    """Erase everything of a user: every view, cache and mirror file, and the user's messages
    in the streams (the `UserErased` tombstone stays). Answers once all of it is done."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    from habitus.bus import connect
    from habitus.bus.rpc import RpcClient, RpcError
    from habitus.contract.rpc import METHODS
    from habitus.ids import check_id

    try:
        check_id(tenant, "tenant")
        check_id(user, "user")
    except ValueError as exc:
        raise fail(str(exc)) from None
    settings = live_settings()

    async def go() -> Any:
        nc = await connect(need(settings.nats_url, "NATS_URL"), "habitus-erase")
        try:
            params = {"user_id": user, **({"reason": reason} if reason else {})}
            return await RpcClient(nc).call("admin.erase_user", tenant, params,
                                            timeout=settings.rpc_timeout_seconds
                                            * METHODS["admin.erase_user"].timeout_factor)
        finally:
            await nc.drain()

    try:
        result = asyncio.run(go())
    except RpcError as exc:
        if exc.code == "unavailable":
            raise fail(f"no gateway answered admin.erase_user: is Habitus running? ({exc})",
                       1) from None
        raise fail(f"erasure failed ({exc.code}): {exc}", 1) from None
    except (NoRespondersError, NatsTimeout):
        raise fail("no gateway answered admin.erase_user: is Habitus running?", 1) from None
    console.print(f"erased {tenant}/{user}: {', '.join(result['projections'])}; "
                  f"{result['purged_messages']} message(s) purged; tombstone at sequence "
                  f"{result['tombstone_seq']}")
