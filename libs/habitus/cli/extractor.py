"""`habitus extractor`: what the LLM extractor made of a user's material, and re-extraction,
through the gateway with an API key (as `habitus rules` does)."""

from __future__ import annotations

import datetime
import re
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.gateway import Gateway, Key, Tenant, Url, fail
from habitus.cli.output import console, echo_json

extractor_app = typer.Typer(help="The LLM extractor (through the gateway, with an API key).",
                            no_args_is_help=True)
User = Annotated[str, typer.Option("--user", help="the user")]
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
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
def status(user: User, as_json: AsJson = False, url: Url = None, key: Key = None,
           tenant: Tenant = None) -> None:
    """The user's rolling summaries, windows by state, and refusals by reason."""
    result = Gateway(url, key, tenant).call("extraction.status", {"user_id": user})
    if as_json:
        echo_json(result)
        return
    if not result["enabled"]:
        console.print(f"the extractor is disabled ({result['reason']}): set "
                      "HABITUS_LLM_BASE_URL and HABITUS_LLM_MODEL where it runs, and restart "
                      "it", style="yellow", soft_wrap=True)
    windows = result["windows"]
    console.print("windows: " + ", ".join(f"{n} {state}" for state, n in windows.items())
                  + (f"  (waiting: {result['last_error']})" if result["last_error"] else ""),
                  soft_wrap=True)
    if result["sources"]:
        table = Table("source", "windows", "summary")
        for source in result["sources"]:
            table.add_row(source["source"], str(source["windows"]), source["summary"])
        console.print(table)
    else:
        console.print(f"no summaries for {user} yet: no window of their material was "
                      "extracted")
    if result["quarantined"]:
        console.print("quarantined: " + ", ".join(
            f"{n} {reason}" for reason, n in result["quarantined"].items()))


@extractor_app.command("quarantine")
def quarantine(user: User, limit: Annotated[int, typer.Option(help="at most this many")] = 20,
               as_json: AsJson = False, url: Url = None, key: Key = None,
               tenant: Tenant = None) -> None:
    """What validation refused for the user, newest first, and why."""
    items = Gateway(url, key, tenant).call("extraction.quarantine",
                                           {"user_id": user, "limit": limit})["items"]
    if as_json:
        echo_json(items)
        return
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
              url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """Extract windows again with the current prompt version (a new prompt never re-spends
    tokens on old material unless asked)."""
    try:
        at = parse_since(since)
    except ValueError as exc:
        raise fail(str(exc)) from None
    params: dict[str, Any] = {"since": at}
    if user:
        params["user_id"] = user
    if source:
        params["source"] = source
    result = Gateway(url, key, tenant).call("extraction.reextract", params)
    console.print(f"{result['windows']} window(s) queued for {result['prompt_version']}")
