"""`habitus rules`: tool-scoped rules through the gateway, as a platform's operator would.

It talks HTTP with an API key, not the bus: the same door, checks and answers an agent gets.
The gateway and the key come from `--url`/`--key`, `HABITUS_URL`/`HABITUS_API_KEY`, or, next to
a running `habitus up`, its gateway and the local `dev` key (see `habitus.cli_gateway`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from habitus.cli_gateway import Key, Url, call

rules_app = typer.Typer(help="Tool-scoped rules (through the gateway, with an API key).",
                        no_args_is_help=True)
console = Console()

User = Annotated[str | None, typer.Option("--user", help="the user (omit with --scope tenant)")]
Scope = Annotated[str, typer.Option("--scope", help="user, or tenant: every user's")]


def _owner(user: str | None, scope: str) -> dict[str, Any]:
    return {"scope": scope, **({"user_id": user} if user else {})}


@rules_app.command("list")
def list_rules(user: User = None, tool: Annotated[str | None, typer.Option(
        "--tool", help="only this tool")] = None,
        priority: Annotated[str | None, typer.Option(help="critical, high or normal")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print the rules as JSON")
                           ] = False,
        url: Url = None, key: Key = None) -> None:
    """The user's rules and the tenant's, critical first, newest first."""
    params: dict[str, Any] = {**({"user_id": user} if user else {}),
                              **({"tool_name": tool} if tool else {}),
                              **({"priority": priority} if priority else {})}
    result = call("memory.tool_rule_list", params, url, key)
    if as_json:
        typer.echo(json.dumps(result["rules"], indent=1))
        return
    table = Table("id", "tool", "priority", "scope", "source", "rule")
    for rule in result["rules"]:
        table.add_row(rule["id"], rule["tool_name"], rule["priority"], rule["scope"],
                      rule["source"], rule["rule"])
    console.print(table)


@rules_app.command("put")
def put_rule(tool: Annotated[str, typer.Option("--tool", help="the tool; * is every tool")],
             rule: Annotated[str, typer.Option("--rule", help="the guidance")],
             user: User = None, scope: Scope = "user",
             priority: Annotated[str, typer.Option(help="critical, high or normal")] = "normal",
             tag: Annotated[list[str] | None, typer.Option("--tag", help="a label")] = None,
             rule_id: Annotated[str | None, typer.Option("--id", help="replace this rule")
                                ] = None,
             url: Url = None, key: Key = None) -> None:
    """Create or replace a rule; prints it as stored."""
    params = {**_owner(user, scope), "tool_name": tool, "rule": rule, "priority": priority,
              "tags": tag or [], **({"id": rule_id} if rule_id else {})}
    typer.echo(json.dumps(call("memory.tool_rule_put", params, url, key), indent=1))


@rules_app.command("delete")
def delete_rule(tool: Annotated[str, typer.Option("--tool", help="the rule's tool")],
                rule_id: Annotated[str, typer.Option("--id", help="the rule")],
                user: User = None, scope: Scope = "user",
                url: Url = None, key: Key = None) -> None:
    """Delete a rule (exit 1 when there was none)."""
    result = call("memory.tool_rule_delete",
                  {**_owner(user, scope), "tool_name": tool, "id": rule_id}, url, key)
    console.print("deleted" if result["deleted"] else "no such rule")
    if not result["deleted"]:
        raise typer.Exit(1)
