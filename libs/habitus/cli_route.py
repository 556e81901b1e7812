"""`habitus route`: which model the router picks for a query, and why (`router.select_model`
through the gateway, with an API key)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from habitus.cli_gateway import Key, Url, call

console = Console()


def model_list(models: str) -> list[str]:
    """`a, b` -> ["a", "b"]. Names are passed as they are: `qwen3:8b` is a model's name (its
    tag), and the router reads a size from the name itself."""
    return [m.strip() for m in models.split(",") if m.strip()]


def route(query: Annotated[str, typer.Argument(help="the query to route")],
          models: Annotated[str, typer.Option(
              "--models", help="comma-separated models to choose from, e.g. "
                               "qwen3:8b,deepseek-coder-v2:16b")] = "",
          user: Annotated[str | None, typer.Option(
              "--user", help="whose query it is (required with --record)")] = None,
          policy: Annotated[str | None, typer.Option(help="heuristic, learned, sft, bandit, "
                                                          "grpo")] = None,
          urgency: Annotated[float | None, typer.Option(help="0 to 1")] = None,
          default: Annotated[str | None, typer.Option("--default", help="default model")
                             ] = None,
          fallback: Annotated[str | None, typer.Option(
              "--fallback", help="used when the default is not available")] = None,
          record: Annotated[bool, typer.Option(
              help="publish the decision (RouteDecided) so its trace can be joined to it")
                            ] = False,
          as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")
                             ] = False,
          url: Url = None, key: Key = None) -> None:
    """Which model the router picks for a query, and why."""
    params: dict[str, Any] = {"query": query, "available_models": model_list(models)}
    for name, value in (("user_id", user), ("policy", policy), ("urgency", urgency),
                        ("default_model", default), ("fallback_model", fallback)):
        if value is not None:
            params[name] = value
    if record:
        params["record"] = True
    result = call("router.select_model", params, url, key)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    console.print(f"[bold]{escape(result['model'] or '(none)')}[/]  ({escape(result['policy'])}, "
                  f"{escape(result['query_class'])}): {escape(result['reason'])}",
                  soft_wrap=True, highlight=False)
    console.print(f"decision {result['decision_id']}", highlight=False)
