"""`habitus facets`: what the stability detector learned about a user, why, and the user's own
decisions on it (pin, unpin, forget), through the gateway with an API key (`learning.*`).

A facet is named as everything here prints it, `CLASS/KEY` (`style/verbosity`): a positional
argument, so `--key` means the API key in this command as in every other one.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from habitus.cli.gateway import Gateway, Key, Tenant, Url, fail
from habitus.cli.output import console, echo_json

facets_app = typer.Typer(help="Learned facets (through the gateway, with an API key).",
                         no_args_is_help=True)

User = Annotated[str, typer.Option("--user", help="the user")]
FacetName = Annotated[str | None, typer.Argument(
    metavar="CLASS/KEY", help="the facet, e.g. style/verbosity (class: style, identity, "
                              "tooling, veto, goal or channel)", show_default=False)]
#: the spelling before facets were named CLASS/KEY; hidden, it only says what to type now
OldClass = Annotated[str | None, typer.Option("--class", hidden=True)]
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def facet_ref(name: str | None, old_class: str | None = None) -> tuple[str, str]:
    """`style/verbosity` -> ("style", "verbosity"). A key may hold a `/` after its first
    character, a class never does, so the first `/` splits them."""
    if old_class is not None:
        raise fail(f"name the facet as CLASS/KEY, e.g. `{old_class}/verbosity`: --class was "
                   "dropped, and --key is the API key in every command")
    facet_class, slash, facet_key = (name or "").partition("/")
    if not (facet_class and slash and facet_key):
        raise fail(f"give the facet as CLASS/KEY, e.g. style/verbosity (not {name!r})"
                   if name else "give the facet as CLASS/KEY, e.g. style/verbosity")
    return facet_class, facet_key


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
                as_json: AsJson = False, url: Url = None, key: Key = None,
                tenant: Tenant = None) -> None:
    """The user's facets: active then provisional, strongest first."""
    params: dict[str, Any] = {"user_id": user}
    if facet_class:
        params["class"] = facet_class
    if as_of is not None:
        params["as_of"] = as_of
    result = Gateway(url, key, tenant).call("learning.list_facets", params)
    if as_json:
        echo_json(result)
        return
    facets = result["facets"]
    if not facets:
        console.print(empty_facets(user, facet_class, result.get("pending_since")))
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
                      "yet (a rebuild is on its way)")


def empty_facets(user: str, facet_class: str | None, pending_since: float | None) -> str:
    """Why the list is empty, as far as the answer tells: evidence is on its way into the cache
    (the line after says since when), or nothing was stated, learned or set for the user (a
    misspelt user id looks the same: ids are not registered anywhere)."""
    what = f"no {facet_class} facets" if facet_class else "no facets"
    if pending_since is not None:
        return f"{what} for {user} yet"
    return f"{what} for {user}: nothing stated, learned or set for this user yet"


@facets_app.command("explain")
def explain(user: User, facet: FacetName = None,
            as_of: Annotated[float | None, typer.Option(
                "--as-of", help="explain it as it was then (epoch seconds)")] = None,
            as_json: AsJson = False, url: Url = None, key: Key = None, tenant: Tenant = None,
            old_class: OldClass = None) -> None:
    """Why a facet holds its value: every supported value's score, per cue family."""
    facet_class, facet_key = facet_ref(facet, old_class)
    params: dict[str, Any] = {"user_id": user, "class": facet_class, "key": facet_key}
    if as_of is not None:
        params["as_of"] = as_of
    result = Gateway(url, key, tenant).call("learning.explain_facet", params)
    if as_json:
        echo_json(result)
        return
    t = result["thresholds"]
    console.print(Text.assemble(
        (f"{result['class']}/{result['key']}", "bold"),
        f" = {result['value']}: {result['state']}, stability "
        f"{_stability(result['stability'])}, user {result['user_state']} "
        f"(x{result['user_multiplier']}); thresholds active {t['active']}, provisional "
        f"{t['provisional']}, candidate {t['candidate']}; half-life "
        f"{result['half_life_seconds'] / 86400:g} d"), soft_wrap=True)
    if result["next_change_at"] is not None:
        console.print(f"becomes {result['next_state']} at {when(result['next_change_at'])} "
                      "without new evidence")
    table = Table("value", "family", "count", "newest", "weight", "decay", "log count",
                  "contribution")
    for v in result["values"]:
        for fam in v["families"]:
            table.add_row(v["value"], fam["family"], str(fam["count"]), when(fam["newest"]),
                          f"{fam['weight']:.2f}", f"{fam['decay']:.2f}",
                          f"{fam['log_count']:.2f}", f"{fam['contribution']:.3f}")
        table.add_row(v["value"], Text("stability", style="bold"), "", "", "", "", "",
                      Text.assemble(f"{v['base']:.3f} x cue mix {v['cue_multiplier']:.2f} = ",
                                    (f"{v['stability']:.3f}", "bold"), f" ({v['state']})"),
                      end_section=True)
    console.print(table)


def _change(method: str, user: str, facet: str | None, old_class: str | None,
            gateway: Gateway) -> None:
    facet_class, facet_key = facet_ref(facet, old_class)
    result = gateway.call(method, {"user_id": user, "class": facet_class, "key": facet_key})
    console.print(facet_line(result), soft_wrap=True)


@facets_app.command("pin")
def pin(user: User, facet: FacetName = None, url: Url = None, key: Key = None,
        tenant: Tenant = None, old_class: OldClass = None) -> None:
    """Pin a facet to its current value: it never decays and goes into every prompt."""
    _change("learning.pin_facet", user, facet, old_class, Gateway(url, key, tenant))


@facets_app.command("unpin")
def unpin(user: User, facet: FacetName = None, url: Url = None, key: Key = None,
          tenant: Tenant = None, old_class: OldClass = None) -> None:
    """Let the evidence decide again (a facet with none left is dropped)."""
    _change("learning.unpin_facet", user, facet, old_class, Gateway(url, key, tenant))


@facets_app.command("forget")
def forget(user: User, facet: FacetName = None, url: Url = None, key: Key = None,
           tenant: Tenant = None, old_class: OldClass = None) -> None:
    """Forget a facet: it leaves the prompt and the profile, whatever the evidence says."""
    _change("learning.forget_facet", user, facet, old_class, Gateway(url, key, tenant))
