"""`habitus route`: which model the router picks for a query, and why (`router.select_model`
through the gateway, with an API key)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from habitus.cli.gateway import Gateway, Key, Tenant, Url
from habitus.cli.output import console, echo_json


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
          url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """Which model the router picks for a query, and why."""
    params: dict[str, Any] = {"query": query, "available_models": model_list(models)}
    for name, value in (("user_id", user), ("policy", policy), ("urgency", urgency),
                        ("default_model", default), ("fallback_model", fallback)):
        if value is not None:
            params[name] = value
    if record:
        params["record"] = True
    result = Gateway(url, key, tenant).call("router.select_model", params)
    if as_json:
        echo_json(result)
        return
    console.print(Text.assemble((result["model"] or "(none)", "bold"),
                                f"  ({result['policy']}, {result['query_class']}): "
                                f"{result['reason']}"), soft_wrap=True)
    console.print(f"decision {result['decision_id']}")
