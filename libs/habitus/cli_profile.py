"""`habitus profile`: a user's PROFILE.md as the profile renderer holds it (`profile.get`,
through the gateway with an API key)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape

from habitus.cli_gateway import Key, Url, call

profile_app = typer.Typer(help="PROFILE.md (through the gateway, with an API key).",
                          no_args_is_help=True)
console = Console()


@profile_app.command("show")
def show(user: Annotated[str, typer.Option("--user", help="the user")],
         raw: Annotated[bool, typer.Option("--raw", help="print the markdown as it is")
                        ] = False,
         as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")
                            ] = False,
         url: Url = None, key: Key = None) -> None:
    """The user's PROFILE.md, rendered (version 0: nothing saved yet, what would be now)."""
    result = call("profile.get", {"user_id": user}, url, key)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    if raw:
        typer.echo(result["markdown"], nl=not result["markdown"].endswith("\n"))
        return
    console.print(f"[dim]{escape(result['user_id'])}: version {result['version']}, sha256 "
                  f"{result['sha256'][:12]}[/]", highlight=False, markup=True)
    console.print(Markdown(result["markdown"]))
