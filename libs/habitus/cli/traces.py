"""`habitus traces`: the trace analyzer from a shell, through the gateway with an API key (as
`habitus rules` does); `habitus route` is in `habitus.cli.route`.

With no traces recorded, the statistics are zeros and an empty table, which reads like a
failure; the commands say instead that nothing was recorded yet (a search with no hits checks
which of the two it is: no traces at all, or none that match).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.gateway import Gateway, Key, Tenant, Url
from habitus.cli.output import console, echo_json

traces_app = typer.Typer(help="The trace analyzer (through the gateway, with an API key).",
                         no_args_is_help=True)

User = Annotated[str | None, typer.Option("--user", help="only this user's traces")]
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def nothing_recorded(user: str | None) -> str:
    return f"no traces recorded yet for {user}" if user else \
        "no traces recorded yet for this tenant"


@traces_app.command("stats")
def stats(user: User = None, as_json: AsJson = False, url: Url = None, key: Key = None,
          tenant: Tenant = None) -> None:
    """The summary and the per-route statistics."""
    gateway = Gateway(url, key, tenant)
    params = {"user_id": user} if user else {}
    summary = gateway.call("traces.summary", params)
    routes = gateway.call("traces.route_stats", params)["routes"]
    if as_json:
        echo_json({"summary": summary, "routes": routes})
        return
    if not summary["traces"]:
        console.print(nothing_recorded(user))
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
           user: User = None,
           limit: Annotated[int, typer.Option("--limit", help="at most this many")] = 20,
           as_json: AsJson = False, url: Url = None, key: Key = None,
           tenant: Tenant = None) -> None:
    """Traces whose query or result match, best first."""
    gateway = Gateway(url, key, tenant)
    params: dict[str, Any] = {"text": text, "limit": limit, **({"user_id": user} if user else {})}
    hits = gateway.call("traces.search", params)["traces"]
    if as_json:
        echo_json(hits)
        return
    if not hits:
        summary = gateway.probe("traces.summary", {"user_id": user} if user else {})
        none_at_all = isinstance(summary, dict) and summary.get("traces") == 0
        console.print(nothing_recorded(user) if none_at_all else f"no trace matches {text!r}",
                      soft_wrap=True)
        return
    for hit in hits:
        console.print(f"{hit['trace_id']}  {hit['model']}  {hit['outcome'] or '-'}  "
                      f"{hit['query'][:80]}", soft_wrap=True)
