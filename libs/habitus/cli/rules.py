"""`habitus rules`: tool-scoped rules through the gateway, as a platform's operator would.

It talks HTTP with an API key, not the bus: the same door, checks and answers an agent gets.
The gateway and the key come from `--url`/`--key`, `HABITUS_URL`/`HABITUS_API_KEY`, or, next to
a running `habitus up`, its gateway and the local `dev` key (see `habitus.cli.gateway`).

A rule's text and priority print as they are: the prompt shows a rule as `**[critical]** ...`
and an operator comparing the two must see the same brackets (see `habitus.cli.output`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.gateway import Gateway, Key, Tenant, Url
from habitus.cli.output import console, echo_json

rules_app = typer.Typer(help="Tool-scoped rules (through the gateway, with an API key).",
                        no_args_is_help=True)

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
        url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """The user's rules and the tenant's, critical first, newest first."""
    params: dict[str, Any] = {**({"user_id": user} if user else {}),
                              **({"tool_name": tool} if tool else {}),
                              **({"priority": priority} if priority else {})}
    result = Gateway(url, key, tenant).call("memory.tool_rule_list", params)
    if as_json:
        echo_json(result["rules"])
        return
    if not result["rules"]:
        console.print(empty_rules(user, tool, priority), soft_wrap=True)
        return
    table = Table("id", "tool", "priority", "scope", "source", "rule")
    for rule in result["rules"]:
        table.add_row(rule["id"], rule["tool_name"], f"[{rule['priority']}]", rule["scope"],
                      rule["source"], rule["rule"])
    console.print(table)


def empty_rules(user: str | None, tool: str | None, priority: str | None) -> str:
    """`no critical rules for send_email of alice or the tenant`: what was asked for."""
    what = f"no {priority} rules" if priority else "no rules"
    of = f" for {tool}" if tool else ""
    whose = f" of {user} or the tenant" if user else " of the tenant"
    return f"{what}{of}{whose}"


@rules_app.command("put")
def put_rule(tool: Annotated[str, typer.Option("--tool", help="the tool; * is every tool")],
             rule: Annotated[str, typer.Option("--rule", help="the guidance")],
             user: User = None, scope: Scope = "user",
             priority: Annotated[str, typer.Option(help="critical, high or normal")] = "normal",
             tag: Annotated[list[str] | None, typer.Option("--tag", help="a label")] = None,
             rule_id: Annotated[str | None, typer.Option("--id", help="replace this rule")
                                ] = None,
             url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """Create or replace a rule; prints it as stored (JSON)."""
    params = {**_owner(user, scope), "tool_name": tool, "rule": rule, "priority": priority,
              "tags": tag or [], **({"id": rule_id} if rule_id else {})}
    echo_json(Gateway(url, key, tenant).call("memory.tool_rule_put", params))


@rules_app.command("delete")
def delete_rule(tool: Annotated[str, typer.Option("--tool", help="the rule's tool")],
                rule_id: Annotated[str, typer.Option("--id", help="the rule")],
                user: User = None, scope: Scope = "user",
                url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """Delete a rule (exit 1 when there was none)."""
    result = Gateway(url, key, tenant).call(
        "memory.tool_rule_delete", {**_owner(user, scope), "tool_name": tool, "id": rule_id})
    console.print("deleted" if result["deleted"] else "no such rule")
    if not result["deleted"]:
        raise typer.Exit(1)
