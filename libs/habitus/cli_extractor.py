"""`habitus extractor`: what the LLM extractor made of a user's material, and re-extraction,
through the gateway with an API key (as `habitus rules` does)."""

from __future__ import annotations

import datetime
import json
import re
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from habitus.cli_gateway import Key, Url, call

extractor_app = typer.Typer(help="The LLM extractor (through the gateway, with an API key).",
                            no_args_is_help=True)
console = Console()
User = Annotated[str, typer.Option("--user", help="the user")]
_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """Epoch seconds from `1764547200`, `2026-11-30`, `2026-11-30T08:00:00+00:00` (no zone:
    UTC) or an age such as `7d`, `12h`, `30m`. Raises ValueError naming the forms."""
    text = text.strip()
    now = time.time() if now is None else now
    match = _AGO.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: give epoch seconds, an ISO date or time, or an "
                         "age such as 7d, 12h, 30m") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


@extractor_app.command("status")
def status(user: User, url: Url = None, key: Key = None,
           as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The user's rolling summaries, windows by state, and refusals by reason."""
    result = call("extraction.status", {"user_id": user}, url, key)
    if as_json:
        console.print_json(json.dumps(result))
        return
    if not result["enabled"]:
        console.print(f"[yellow]the extractor is disabled: {result['reason']}[/]")
    windows = result["windows"]
    console.print("windows: " + ", ".join(f"{n} {state}" for state, n in windows.items())
                  + (f"  (waiting: {result['last_error']})" if result["last_error"] else ""))
    table = Table("source", "windows", "summary")
    for source in result["sources"]:
        table.add_row(source["source"], str(source["windows"]), source["summary"])
    console.print(table)
    if result["quarantined"]:
        console.print("quarantined: " + ", ".join(
            f"{n} {reason}" for reason, n in result["quarantined"].items()))


@extractor_app.command("quarantine")
def quarantine(user: User, limit: Annotated[int, typer.Option(help="at most this many")] = 20,
               url: Url = None, key: Key = None) -> None:
    """What validation refused for the user, newest first, and why."""
    items = call("extraction.quarantine", {"user_id": user, "limit": limit}, url, key)["items"]
    table = Table("reason", "what", "detail", "source")
    for item in items:
        raw = item["raw"]
        what = (f"{raw.get('class')}/{raw.get('key')}={raw.get('value')}"
                if isinstance(raw, dict) and "class" in raw else
                "the whole output" if item["index"] is None else str(raw)[:60])
        table.add_row(item["reason"], what, item["detail"], item["source"])
    console.print(table if items else "nothing quarantined")


@extractor_app.command("reextract")
def reextract(since: Annotated[str, typer.Option(
                  "--since", help="windows closed since: epoch seconds, an ISO date, or an "
                                  "age (7d, 12h)")],
              user: Annotated[str | None, typer.Option(
                  "--user", help="only this user (default: every user of the tenant)")] = None,
              source: Annotated[str | None, typer.Option(
                  "--source", help="only this source (conversations, email, "
                                   "document:<id>)")] = None,
              url: Url = None, key: Key = None) -> None:
    """Extract windows again with the current prompt version (a new prompt never re-spends
    tokens on old material unless asked)."""
    try:
        at = parse_since(since)
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    params: dict[str, Any] = {"since": at}
    if user:
        params["user_id"] = user
    if source:
        params["source"] = source
    result = call("extraction.reextract", params, url, key)
    console.print(f"{result['windows']} window(s) queued for {result['prompt_version']}")
