"""The `habitus` command: run the system, migrate, serve one service, replay, manage keys.

Commands other than `up` need the server URLs; when they are not in the environment and a local
`habitus up` is running on the same data directory, its URLs are used, so `habitus keys create`
just works next to `make run`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from habitus.cli_extractor import extractor_app
from habitus.cli_facets import facets_app
from habitus.cli_habits import habits_app
from habitus.cli_ops import dlq_app, events_app, lag, live_settings
from habitus.cli_profile import profile_app
from habitus.cli_route import route
from habitus.cli_rules import rules_app
from habitus.cli_run import demo, up
from habitus.cli_traces import traces_app
from habitus.config import Settings

app = typer.Typer(help="Habitus: the learning layer for AI agents.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys: one tenant each, stored hashed.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(rules_app, name="rules")
app.add_typer(traces_app, name="traces")
app.add_typer(extractor_app, name="extractor")
app.add_typer(facets_app, name="facets")
app.add_typer(profile_app, name="profile")
app.add_typer(habits_app, name="habits")
app.add_typer(events_app, name="events")
app.add_typer(dlq_app, name="dlq")
app.command("route")(route)
app.command("up")(up)
app.command("demo")(demo)
app.command("lag")(lag)
console = Console()


def _settings() -> Settings:
    """Settings, the URLs the environment leaves unset taken from a live `habitus up` here."""
    return live_settings()


def _need(value: str | None, name: str) -> str:
    if not value:
        console.print(f"[red]HABITUS_{name} is not set and no `habitus up` is running here.[/]")
        raise typer.Exit(2)
    return value


@app.command()
def migrate(only: Annotated[list[str] | None, typer.Option(help="schemas to migrate")] = None
            ) -> None:
    """Apply every service's migrations (idempotent)."""
    from habitus.db.migrate import migrate as run_migrate

    settings = _settings()
    for r in run_migrate(_need(settings.database_url, "DATABASE_URL"), only):
        console.print(f"{r.schema}: {r.before or 'empty'} -> {r.after}")


@app.command()
def serve(service: str) -> None:
    """Run one service in the foreground (what containers and `habitus up` run)."""
    from habitus.service import registry
    from habitus.service.host import ServiceHost
    from habitus.telemetry.logging import configure_logging

    try:
        descriptor = registry.service(service)
    except LookupError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None
    settings = _settings()
    configure_logging(service, settings.log_level, settings.log_json)
    run_event_loop(ServiceHost(descriptor, settings).serve_forever())


@app.command()
def replay(
    projection: str,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the rebuild")] = 600.0,
    force: Annotated[bool, typer.Option(help="rebuild even if the stream lost old events")
                     ] = False,
) -> None:
    """Drop a projection's tables and rebuild them from stream sequence 1."""
    from habitus.bus import connect
    from habitus.db.pool import open_pool
    from habitus.projection.registry import resolve
    from habitus.projection.replay import replay as run_replay

    settings = _settings()
    try:
        proj = resolve(projection)
    except (LookupError, TypeError, ImportError) as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None

    async def go() -> Any:
        nc = await connect(_need(settings.nats_url, "NATS_URL"), "habitus-replay")
        pool = await open_pool(_need(settings.database_url, "DATABASE_URL"), name="replay")
        try:
            return await run_replay(proj, nc, pool, timeout=timeout, force=force)
        finally:
            await pool.close()
            await nc.drain()

    from habitus.projection.replay import IncompleteHistory

    try:
        result = asyncio.run(go())
    except IncompleteHistory as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None
    if result.rebuilt_here:
        console.print(f"{proj.name}: rebuilt up to stream sequence {result.checkpoint}")
    else:
        console.print(f"{proj.name}: reset; the running service holds it and is rebuilding")


@app.command()
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
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None
    settings = _settings()

    async def go() -> Any:
        nc = await connect(_need(settings.nats_url, "NATS_URL"), "habitus-erase")
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
            console.print(f"[red]no gateway answered admin.erase_user: is Habitus running? "
                          f"({exc})")
        else:
            console.print(f"[red]erasure failed ({exc.code}): {exc}")
        raise typer.Exit(1) from None
    except (NoRespondersError, NatsTimeout):
        console.print("[red]no gateway answered admin.erase_user: is Habitus running?")
        raise typer.Exit(1) from None
    console.print(f"erased {tenant}/{user}: {', '.join(result['projections'])}; "
                  f"{result['purged_messages']} message(s) purged; tombstone at sequence "
                  f"{result['tombstone_seq']}")


@app.command()
def asyncapi(
    output: Annotated[str, typer.Option(help="file to write; '-' for stdout")] = "-",
) -> None:
    """Write the AsyncAPI document of every event type (generated from the catalog)."""
    from habitus.events.asyncapi import document

    text = json.dumps(document(), indent=2, sort_keys=True)
    if output == "-":
        typer.echo(text)
    else:
        with open(output, "w") as fh:
            fh.write(text + "\n")
        console.print(f"wrote {output}")


def run_event_loop(main: Any) -> Any:
    """Services run on uvloop where it is installed (it is a dependency on Linux): the bus
    client, the HTTP server and the database driver all spend their time in the event loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def _with_pool(fn: Any) -> Any:
    from habitus.db.pool import open_pool

    settings = _settings()

    async def go() -> Any:
        pool = await open_pool(_need(settings.database_url, "DATABASE_URL"), name="cli")
        try:
            return await fn(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="the tenant this key acts for")],
    admin: Annotated[bool, typer.Option(help="may act for any tenant it names")] = False,
    label: Annotated[str, typer.Option(help="a note to recognise the key")] = "",
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from habitus.auth.keys import create_key
    from habitus.ids import check_id

    try:
        check_id(tenant, "tenant")
    except ValueError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None
    key = _with_pool(lambda pool: create_key(pool, tenant, is_admin=admin, label=label))
    typer.echo(key)


@keys_app.command("list")
def keys_list(tenant: Annotated[str | None, typer.Option()] = None) -> None:
    """List keys (prefixes only)."""
    from habitus.auth.keys import list_keys

    rows = _with_pool(lambda pool: list_keys(pool, tenant))
    table = Table("prefix", "tenant", "admin", "label", "created", "revoked")
    for r in rows:
        table.add_row(r["key_prefix"], r["tenant_id"], str(r["is_admin"]), r["label"],
                      str(r["created_at"]), str(r["revoked_at"] or ""))
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_or_prefix: str) -> None:
    """Revoke a key by its value or its printed prefix."""
    from habitus.auth.keys import AmbiguousKey, revoke

    try:
        count = _with_pool(lambda pool: revoke(pool, key_or_prefix))
    except AmbiguousKey as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2) from None
    console.print(f"revoked {count} key(s)")
    if not count:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
