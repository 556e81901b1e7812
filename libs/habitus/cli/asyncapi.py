"""`habitus asyncapi`: the AsyncAPI document of every event type, generated from the catalog
(`habitus.bus.asyncapi`; docs/asyncapi.json is its output)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from habitus.cli.output import console


def asyncapi(
    output: Annotated[str, typer.Option(help="file to write; '-' for stdout")] = "-",
) -> None:
    """Write the AsyncAPI document of every event type (generated from the catalog)."""
    from habitus.bus.asyncapi import document

    text = json.dumps(document(), indent=2, sort_keys=True)
    if output == "-":
        typer.echo(text)
    else:
        with open(output, "w") as fh:
            fh.write(text + "\n")
        console.print(f"wrote {output}")
