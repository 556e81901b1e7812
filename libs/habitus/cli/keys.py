"""`habitus keys create|list|revoke`: API keys, one tenant each, stored hashed (in the gateway's
key table, straight through the database: no gateway needs to run)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.connect import live_settings, need
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
        raise fail(str(exc)) from None
    console.print(f"revoked {count} key(s)")
    if not count:
        raise typer.Exit(1)
