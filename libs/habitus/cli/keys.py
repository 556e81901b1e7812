"""`habitus keys create|list|revoke`: API keys, one tenant and one role each, stored hashed (in
the gateway's key table, straight through the database: no gateway needs to run). A revocation
is also announced on NATS, so every running gateway refuses the key at once."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.connect import live_settings, nats, need
from habitus.cli.gateway import fail
from habitus.cli.output import console, echo_json

keys_app = typer.Typer(help="API keys: one tenant each, stored hashed.", no_args_is_help=True)


def _with_pool(fn: Any) -> Any:
    from habitus.db.pool import open_pool

    settings = live_settings()

    async def go() -> Any:
        pool = await open_pool(need(settings.database_url, "DATABASE_URL"), name="cli")
        try:
            return await fn(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="the tenant this key acts for")],
    role: Annotated[str, typer.Option(help=(
        "agent: ingest, and each user's reads and commands; tenant-admin: also what applies "
        "to every user (the habits law, routing policy and configuration, tenant-wide rules, "
        "erasure)"))] = "agent",
    admin: Annotated[bool, typer.Option(help="may act for any tenant it names")] = False,
    label: Annotated[str, typer.Option(help="a note to recognise the key")] = "",
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from habitus.auth.keys import create_key
    from habitus.auth.roles import check_role
    from habitus.ids import check_id

    try:
        check_id(tenant, "tenant")
        check_role(role)
    except ValueError as exc:
        raise fail(str(exc)) from None
    key = _with_pool(lambda pool: create_key(pool, tenant, is_admin=admin, label=label,
                                             role=role))
    typer.echo(key)


@keys_app.command("list")
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
    table = Table("prefix", "tenant", "role", "admin", "label", "created", "revoked")
    for r in rows:
        table.add_row(r["key_prefix"], r["tenant_id"], r["role"], str(r["is_admin"]), r["label"],
                      str(r["created_at"]), str(r["revoked_at"] or ""))
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_or_prefix: str) -> None:
    """Revoke a key by its value or its printed prefix; running gateways refuse it at once."""
    from habitus.auth.keys import AmbiguousKey, revoke

    try:
        revoked = _with_pool(lambda pool: revoke(pool, key_or_prefix))
    except AmbiguousKey as exc:
        raise fail(str(exc)) from None
    console.print(f"revoked {len(revoked)} key(s)")
    if not revoked:
        raise typer.Exit(1)
    _announce(revoked)


def _announce(revoked: list[tuple[str, str]]) -> None:
    """Tell the running gateways. Without NATS the key is still revoked (the table is the
    truth): gateways refuse it when their cache entry expires, and the command says when."""
    from habitus.auth.revocation import announce

    settings = live_settings()

    async def go() -> None:
        async with nats(settings, "habitus-keys") as nc:
            await announce(nc, revoked)

    try:
        asyncio.run(go())
    except (typer.Exit, Exception):
        console.print(f"could not announce it on NATS: running gateways refuse the key within "
                      f"HABITUS_KEY_CACHE_SECONDS ({settings.key_cache_seconds:g}s)")
        return
    console.print("running gateways refuse it now")
