"""The `habitus` command: run the system, migrate, serve one service, replay, manage keys, and
the operator's commands through the gateway and on the bus.

Commands other than `up` need the server URLs; when they are not in the environment and a local
`habitus up` is running on the same data directory, its URLs are used, so `habitus keys create`
just works next to `make run`.

`habitus --help` lists the commands in three panels, in the order a new user needs them: run
the system (`up` and `demo` first), then what goes through the gateway (`context`, the prompt
an agent gets, first), then the bus and the database. Every command spells the same things the
same way: `--url`, `--key`, `--tenant`, `--user`, `--json` (see `habitus.cli_gateway`); the older
`--api-key` is still read as `--key`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli_context import context
from habitus.cli_extractor import extractor_app
from habitus.cli_facets import facets_app
from habitus.cli_gateway import fail
from habitus.cli_habits import habits_app
from habitus.cli_ops import dlq_app, events_app, lag, live_settings
from habitus.cli_output import console, echo_json
from habitus.cli_profile import profile_app
from habitus.cli_route import route
from habitus.cli_rules import rules_app
from habitus.cli_run import demo, up
from habitus.cli_traces import traces_app
from habitus.config import Settings

#: flag spellings from before the vocabulary was one, read as today's (hidden from --help)
DEPRECATED_FLAGS = {"api-key": "key"}


def normalize_flag(token: str) -> str:
    """Click hands every option name (without its dashes) and choice here before matching."""
    return DEPRECATED_FLAGS.get(token, token)


RUN = "Run the system"
GATEWAY = "Through the gateway (an API key)"
BUS = "On the bus and the database"

app = typer.Typer(help="Habitus: the learning layer for AI agents.", no_args_is_help=True,
                  context_settings={"token_normalize_func": normalize_flag})
keys_app = typer.Typer(help="API keys: one tenant each, stored hashed.", no_args_is_help=True)


def _settings() -> Settings:
    """Settings, the URLs the environment leaves unset taken from a live `habitus up` here."""
    return live_settings()


def _need(value: str | None, name: str) -> str:
    if not value:
        raise fail(f"HABITUS_{name} is not set and no `habitus up` is running here.")
    return value


def migrate(only: Annotated[list[str] | None, typer.Option(help="schemas to migrate")] = None
            ) -> None:
    """Apply every service's migrations (idempotent)."""
    from habitus.db.migrate import migrate as run_migrate

    settings = _settings()
    for r in run_migrate(_need(settings.database_url, "DATABASE_URL"), only):
        console.print(f"{r.schema}: {r.before or 'empty'} -> {r.after}")


#: `habitus.service.registry.GROUP`, spelt out: importing the registry imports the service
#: host (NATS, the database driver), most of a second that every `habitus` run would pay
#: for its help text (a unit test holds the two equal)
SERVICES_GROUP = "habitus.services"


def service_names() -> list[str]:
    """The installed services' names, from their entry points' metadata alone (a few
    milliseconds): naming them imports no service, and the registry checks that each entry
    point's name is its descriptor's."""
    from importlib.metadata import entry_points

    return sorted(ep.name for ep in entry_points(group=SERVICES_GROUP))


def serve(service: Annotated[str, typer.Argument(
        help="the service to run, one of those listed above", show_default=False)]) -> None:
    """Run one service in the foreground (what containers and `habitus up` run)."""
    from habitus.service import registry
    from habitus.service.host import ServiceHost
    from habitus.telemetry.logging import configure_logging

    try:
        descriptor = registry.service(service)
    except LookupError as exc:
        raise fail(str(exc)) from None
    settings = _settings()
    configure_logging(service, settings.log_level, settings.log_json)
    run_event_loop(ServiceHost(descriptor, settings).serve_forever())


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
        raise fail(str(exc)) from None

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
        raise fail(str(exc)) from None
    if result.rebuilt_here:
        console.print(f"{proj.name}: rebuilt up to stream sequence {result.checkpoint}")
    else:
        console.print(f"{proj.name}: reset; the running service holds it and is rebuilding")


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
            raise fail(f"no gateway answered admin.erase_user: is Habitus running? ({exc})",
                       1) from None
        raise fail(f"erasure failed ({exc.code}): {exc}", 1) from None
    except (NoRespondersError, NatsTimeout):
        raise fail("no gateway answered admin.erase_user: is Habitus running?", 1) from None
    console.print(f"erased {tenant}/{user}: {', '.join(result['projections'])}; "
                  f"{result['purged_messages']} message(s) purged; tombstone at sequence "
                  f"{result['tombstone_seq']}")


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
        raise fail(str(exc)) from None
    key = _with_pool(lambda pool: create_key(pool, tenant, is_admin=admin, label=label))
    typer.echo(key)


def keys_list(tenant: Annotated[str | None, typer.Option(
                  "--tenant", help="only this tenant's keys")] = None,
              as_json: Annotated[bool, typer.Option("--json", help="print the keys as JSON")
                                 ] = False) -> None:
    """List keys (prefixes only)."""
    from habitus.auth.keys import list_keys

    rows = _with_pool(lambda pool: list_keys(pool, tenant))
    if as_json:
        echo_json(rows)
        return
    if not rows:
        console.print(f"no keys of {tenant}" if tenant else "no keys")
        return
    table = Table("prefix", "tenant", "admin", "label", "created", "revoked")
    for r in rows:
        table.add_row(r["key_prefix"], r["tenant_id"], str(r["is_admin"]), r["label"],
                      str(r["created_at"]), str(r["revoked_at"] or ""))
    console.print(table)


def keys_revoke(key_or_prefix: str) -> None:
    """Revoke a key by its value or its printed prefix."""
    from habitus.auth.keys import AmbiguousKey, revoke

    try:
        count = _with_pool(lambda pool: revoke(pool, key_or_prefix))
    except AmbiguousKey as exc:
        raise fail(str(exc)) from None
    console.print(f"revoked {count} key(s)")
    if not count:
        raise typer.Exit(1)


# Registration order is the order of `habitus --help`: what a new user runs first, first.
app.command("up", rich_help_panel=RUN)(up)
app.command("demo", rich_help_panel=RUN)(demo)
app.command("serve", rich_help_panel=RUN, help=f"{serve.__doc__}\n\nServices: "
            f"{', '.join(service_names()) or 'none installed'}.", short_help=serve.__doc__
            )(serve)
app.command("migrate", rich_help_panel=RUN)(migrate)
app.command("asyncapi", rich_help_panel=RUN)(asyncapi)
app.command("context", rich_help_panel=GATEWAY)(context)
app.add_typer(facets_app, name="facets", rich_help_panel=GATEWAY)
app.add_typer(profile_app, name="profile", rich_help_panel=GATEWAY)
app.add_typer(habits_app, name="habits", rich_help_panel=GATEWAY)
app.add_typer(rules_app, name="rules", rich_help_panel=GATEWAY)
app.command("route", rich_help_panel=GATEWAY)(route)
app.add_typer(traces_app, name="traces", rich_help_panel=GATEWAY)
app.add_typer(extractor_app, name="extractor", rich_help_panel=GATEWAY)
app.add_typer(events_app, name="events", rich_help_panel=BUS)
app.command("lag", rich_help_panel=BUS)(lag)
app.add_typer(dlq_app, name="dlq", rich_help_panel=BUS)
app.command("replay", rich_help_panel=BUS)(replay)
app.command("erase", rich_help_panel=BUS)(erase)
app.add_typer(keys_app, name="keys", rich_help_panel=BUS)
keys_app.command("create")(keys_create)
keys_app.command("list")(keys_list)
keys_app.command("revoke")(keys_revoke)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
