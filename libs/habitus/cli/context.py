"""`habitus context`: what an agent's next prompt carries for a user (`prompt.context`, through
the gateway with an API key), section by section, as the agent gets it.

This is Habitus's main output, so an operator checking what was learned reads it here rather
than reconstructing it from facets, notes and rules: the same call an agent makes, with the
same tools, request and budget, printed as literal text (a tool rule's `**[critical]**` stays).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from habitus.cli.gateway import Gateway, Key, Tenant, Url
from habitus.cli.output import console, echo_json


def tool_list(tools: str | None) -> list[str] | None:
    """`--tools a, b` -> ["a", "b"]; absent -> None (every tool's rules); `--tools ''` -> []
    (no tool's rules), the three cases `prompt.context` tells apart."""
    if tools is None:
        return None
    return [t.strip() for t in tools.split(",") if t.strip()]


def context_params(user: str, tools: str | None = None, request: str | None = None,
                   earlier: list[str] | None = None, budget_chars: int | None = None,
                   unconfirmed: bool = False) -> dict[str, Any]:
    """The `prompt.context` parameters, leaving out what was not given (the method's defaults
    then apply, as they do for an agent that does not send them)."""
    params: dict[str, Any] = {"user_id": user}
    chosen = tool_list(tools)
    if chosen is not None:
        params["tools"] = chosen
    if request is not None:
        params["request"] = request
    if earlier:
        params["context"] = list(earlier)
    if budget_chars is not None:
        params["budget_chars"] = budget_chars
    if unconfirmed:
        params["unconfirmed"] = True
    return params


def context_lines(result: dict[str, Any]) -> list[Text]:
    """The answer as a person reads it: a header, each section under its name (its content as
    it is), and the habits that steer it."""
    sections = result["sections"]
    lines = [Text(f"{result['user_id']}: PROFILE.md version {result['version']}, "
                  f"{len(sections)} section(s), {len(result['text'])} characters", style="dim")]
    if not sections:
        lines.append(Text("nothing for this user yet: no learned facets, notes or tool rules "
                          "(an agent gets an empty context)"))
    for section in sections:
        lines.append(Text(""))
        lines.append(Text(f"-- {section['name']} --", style="bold"))
        lines.append(Text(section["content"].rstrip("\n")))
    if result.get("steered_by"):
        lines.append(Text(""))
        lines.extend(Text(f"steered by habit: {when}", style="dim")
                     for when in result["steered_by"])
    return lines


def context(
    user: Annotated[str, typer.Option("--user", help="the user")],
    tools: Annotated[str | None, typer.Option(
        "--tools", help="comma-separated tools the next turn may call: only their rules are "
                        "included (default: every tool's; '' for none)")] = None,
    request: Annotated[str | None, typer.Option(
        "--request", help="the user's current request: adds the approved habits that apply "
                          "to it (a habits section)")] = None,
    earlier: Annotated[list[str] | None, typer.Option(
        "--earlier", help="an earlier turn that may resolve a reference in --request "
                          "(repeat it, oldest first)")] = None,
    budget_chars: Annotated[int | None, typer.Option(
        "--budget-chars", min=0, help="the most characters of text to return")] = None,
    unconfirmed: Annotated[bool, typer.Option(
        "--unconfirmed", help="add the facets not yet confirmed, each with the question that "
                              "would confirm it")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the answer as JSON")] = False,
    url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """What the next prompt carries for a user: the sections an agent gets (prompt.context)."""
    result = Gateway(url, key, tenant).call(
        "prompt.context", context_params(user, tools, request, earlier, budget_chars,
                                         unconfirmed))
    if as_json:
        echo_json(result)
        return
    for line in context_lines(result):
        console.print(line, soft_wrap=True)
