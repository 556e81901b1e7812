"""`habitus profile`: a user's PROFILE.md as the profile renderer holds it (`profile.get`,
through the gateway with an API key)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markdown import Markdown

from habitus.cli.gateway import Gateway, Key, Tenant, Url
from habitus.cli.output import console, echo_json

profile_app = typer.Typer(help="PROFILE.md (through the gateway, with an API key).",
                          no_args_is_help=True)


@profile_app.command("show")
def show(user: Annotated[str, typer.Option("--user", help="the user")],
         raw: Annotated[bool, typer.Option("--raw", help="print the markdown as it is")
                        ] = False,
         as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")
                            ] = False,
         url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """The user's PROFILE.md, rendered (version 0: nothing saved yet, what would be now)."""
    result = Gateway(url, key, tenant).call("profile.get", {"user_id": user})
    if as_json:
        echo_json(result)
        return
    if raw:
        typer.echo(result["markdown"], nl=not result["markdown"].endswith("\n"))
        return
    console.print(f"{result['user_id']}: version {result['version']}, sha256 "
                  f"{result['sha256'][:12]}", style="dim", soft_wrap=True)
    # a document wraps at a readable width (it is prose; --raw gives it as it is)
    console.print(Markdown(result["markdown"]), width=console.document_width)
