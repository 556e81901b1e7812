"""`habitus traces`: the trace analyzer from a shell, through the gateway with an API key (as
`habitus rules` does); `habitus route` is in `habitus.cli_route`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from habitus.cli_gateway import Key, Url, call

traces_app = typer.Typer(help="The trace analyzer (through the gateway, with an API key).",
                         no_args_is_help=True)
console = Console()


@traces_app.command("stats")
def stats(user: Annotated[str | None, typer.Option("--user", help="only this user")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
          url: Url = None, key: Key = None) -> None:
    """The summary and the per-route statistics."""
    params = {"user_id": user} if user else {}
    summary = call("traces.summary", params, url, key)
    routes = call("traces.route_stats", params, url, key)["routes"]
    if as_json:
        typer.echo(json.dumps({"summary": summary, "routes": routes}, indent=1))
        return
    console.print(f"{summary['traces']} traces, success rate {summary['success_rate']:.2f}, "
                  f"feedback {summary['avg_feedback']}")
    table = Table("model", "agent", "count", "success", "feedback", "latency s")
    for r in routes:
        table.add_row(r["model"], r["agent"], str(r["count"]), f"{r['success_rate']:.2f}",
                      "" if r["avg_feedback"] is None else f"{r['avg_feedback']:.2f}",
                      f"{r['avg_latency']:.2f}")
    console.print(table)


@traces_app.command("search")
def search(text: Annotated[str, typer.Argument(help="words of the query or result")],
           limit: Annotated[int, typer.Option(help="at most this many")] = 20,
           url: Url = None, key: Key = None) -> None:
    """Traces whose query or result match, best first."""
    hits = call("traces.search", {"text": text, "limit": limit}, url, key)["traces"]
    for hit in hits:
        console.print(f"{hit['trace_id']}  {hit['model']}  {hit['outcome'] or '-'}  "
                      f"{hit['query'][:80]}", soft_wrap=True)
