"""`habitus facets`: what the stability detector learned about a user, why, and the user's own
decisions on it (pin, unpin, forget), through the gateway with an API key (`learning.*`)."""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from habitus.cli_gateway import ApiKey, Url, call

facets_app = typer.Typer(help="Learned facets (through the gateway, with an API key).",
                         no_args_is_help=True)
console = Console()

User = Annotated[str, typer.Option("--user", help="the user")]
Class = Annotated[str, typer.Option(
    "--class", help="the facet class: style, identity, tooling, veto, goal or channel")]
FacetKey = Annotated[str, typer.Option("--key", help="the facet key within its class, e.g. "
                                                     "verbosity")]
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def when(epoch: float | None) -> str:
    """An epoch time as `2026-01-02 03:04` UTC; `-` for none."""
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _stability(value: float | None) -> str:
    """A held value (pinned, or reported by the user's account) has no score that decays."""
    return "held" if value is None else f"{value:.2f}"


#: why a facet holds its value, in the words PROFILE.md and the prompt use
_WHY = {"set_by_user": "set by the user", "stated": "said once", "provider": "their account",
        "learned": "learned"}


def _why(facet: dict[str, Any]) -> str:
    if facet.get("user_state") == "pinned":
        return "set by the user"
    return _WHY.get(str(facet.get("origin", "learned")), "learned")


def facet_line(facet: dict[str, Any]) -> str:
    """`style/verbosity = concise (active, pinned)`: a facet after a change."""
    state = facet["state"]
    user_state = facet.get("user_state", "auto")
    extra = "" if user_state == "auto" else f", {user_state}"
    value = f" = {facet['value']}" if "value" in facet else ""
    return f"{facet['class']}/{facet['key']}{value} ({state}{extra})"


@facets_app.command("list")
def list_facets(user: User,
                facet_class: Annotated[str | None, typer.Option(
                    "--class", help="only this class")] = None,
                as_of: Annotated[float | None, typer.Option(
                    "--as-of", help="the cache as it was then (epoch seconds)")] = None,
                as_json: AsJson = False, url: Url = None, key: ApiKey = None) -> None:
    """The user's facets: active then provisional, strongest first."""
    params: dict[str, Any] = {"user_id": user}
    if facet_class:
        params["class"] = facet_class
    if as_of is not None:
        params["as_of"] = as_of
    result = call("learning.list_facets", params, url, key)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    facets = result["facets"]
    if not facets:
        console.print(f"no facets for {escape(user)}", highlight=False)
    else:
        table = Table("class", "key", "value", "state", "why", "user", "stability",
                      "evidence", "last evidence")
        for f in facets:
            table.add_row(f["class"], f["key"], f["value"], f["state"], _why(f),
                          f["user_state"], _stability(f["stability"]),
                          str(f["evidence_count"]), when(f["last_evidence_at"]))
        console.print(table)
    if result.get("pending_since") is not None:
        console.print(f"evidence since {when(result['pending_since'])} is not in the cache "
                      "yet (a rebuild is on its way)", highlight=False)


@facets_app.command("explain")
def explain(user: User, facet_class: Class, facet_key: FacetKey,
            as_of: Annotated[float | None, typer.Option(
                "--as-of", help="explain it as it was then (epoch seconds)")] = None,
            as_json: AsJson = False, url: Url = None, key: ApiKey = None) -> None:
    """Why a facet holds its value: every supported value's score, per cue family."""
    params: dict[str, Any] = {"user_id": user, "class": facet_class, "key": facet_key}
    if as_of is not None:
        params["as_of"] = as_of
    result = call("learning.explain_facet", params, url, key)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    t = result["thresholds"]
    console.print(
        f"[bold]{escape(result['class'])}/{escape(result['key'])}[/] = "
        f"{escape(str(result['value']))}: {result['state']}, stability "
        f"{_stability(result['stability'])}, user {result['user_state']} "
        f"(x{result['user_multiplier']}); thresholds active {t['active']}, provisional "
        f"{t['provisional']}, candidate {t['candidate']}; half-life "
        f"{result['half_life_seconds'] / 86400:g} d", soft_wrap=True, highlight=False)
    if result["next_change_at"] is not None:
        console.print(f"becomes {result['next_state']} at {when(result['next_change_at'])} "
                      "without new evidence", highlight=False)
    table = Table("value", "family", "count", "newest", "weight", "decay", "log count",
                  "contribution")
    for v in result["values"]:
        for fam in v["families"]:
            table.add_row(v["value"], fam["family"], str(fam["count"]), when(fam["newest"]),
                          f"{fam['weight']:.2f}", f"{fam['decay']:.2f}",
                          f"{fam['log_count']:.2f}", f"{fam['contribution']:.3f}")
        table.add_row(v["value"], "[bold]stability[/]", "", "", "", "", "",
                      f"{v['base']:.3f} x cue mix {v['cue_multiplier']:.2f} = "
                      f"[bold]{v['stability']:.3f}[/] ({v['state']})", end_section=True)
    console.print(table)


def _change(method: str, user: str, facet_class: str, facet_key: str, url: str | None,
            key: str | None) -> None:
    result = call(method, {"user_id": user, "class": facet_class, "key": facet_key}, url, key)
    console.print(facet_line(result), highlight=False, markup=False)


@facets_app.command("pin")
def pin(user: User, facet_class: Class, facet_key: FacetKey, url: Url = None,
        key: ApiKey = None) -> None:
    """Pin a facet to its current value: it never decays and goes into every prompt."""
    _change("learning.pin_facet", user, facet_class, facet_key, url, key)


@facets_app.command("unpin")
def unpin(user: User, facet_class: Class, facet_key: FacetKey, url: Url = None,
          key: ApiKey = None) -> None:
    """Let the evidence decide again (a facet with none left is dropped)."""
    _change("learning.unpin_facet", user, facet_class, facet_key, url, key)


@facets_app.command("forget")
def forget(user: User, facet_class: Class, facet_key: FacetKey, url: Url = None,
           key: ApiKey = None) -> None:
    """Forget a facet: it leaves the prompt and the profile, whatever the evidence says."""
    _change("learning.forget_facet", user, facet_class, facet_key, url, key)
