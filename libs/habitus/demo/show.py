"""Showing what was learned: per user and per tenant's routing, as Rich tables and panels, and
the lines to try on a system `--keep` left running.

What it prints of the data (facet values, rules with their `[critical]` priority, PROFILE.md,
stories) is text, never Rich markup: `_text` keeps brackets as they are (and `run_demo` escapes
the one value it prints in markup).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from habitus.demo.progress import Lag
from habitus.demo.scenario import Scenario


def _text(*values: object) -> list[Text]:
    """Table cells that show `values` as they are: a plain str cell is Rich markup, which would
    swallow a rule's `[critical]` or any bracketed facet value."""
    return [Text(str(v)) for v in values]


def lag_table(lags: Iterable[Lag], waiting: dict[str, str]) -> Table:
    table = Table("projection", "stream", "last seq", "checkpoint", "pending",
                  title="Projections catching up", title_justify="left")
    for lag in lags:
        pending = "-" if lag.pending is None else str(lag.pending)
        style = "green" if lag.caught_up else "yellow"
        table.add_row(*_text(lag.projection, lag.stream, lag.last_seq or 0,
                             lag.checkpoint or 0), Text(pending, style=style))
    caption = ("pending: events the projection reads that it has not applied yet (its "
               "checkpoint stops at the last event it reads)")
    if waiting:
        caption += "; still working: " + ", ".join(f"{u} ({w})" for u, w in waiting.items())
    table.caption = Text(caption)
    return table


def show_user(out: Console, tenant: Any, user: Any, got: dict[str, Any]) -> None:
    out.rule(Text.assemble((f"{tenant.tenant_id}/{user.user_id}", "bold"),
                           f": {user.name}, {user.persona}"))
    out.print(Text(user.story, style="dim"))
    facets = Table("class", "key", "value", "state", "stability", "set by",
                   title="Active and provisional facets", title_justify="left")
    for f in got["facets"]:
        set_by = {"set_by_user": "the user", "provider": "their account",
                  "stated": "said once"}.get(f.get("origin", ""), "learned")
        if f["pinned"]:
            set_by = "the user"
        stability = "" if f["stability"] is None else f"{f['stability']:.2f}"
        facets.add_row(*_text(f["class"], f["key"], f["value"], f["state"], stability, set_by))
    out.print(facets)
    out.print(Panel(Text(got["profile"].rstrip()), title="PROFILE.md", expand=False))
    explain = got["explain"]
    if explain:
        table = Table("value", "family", "count", "decay", "contribution",
                      title=Text(f"learning.explain_facet {explain['class']}/{explain['key']}: "
                                 f"{explain['state']}, stability {explain['stability']}"),
                      title_justify="left")
        for v in explain["values"]:
            for fam in v.get("families", v.get("cue_families", [])):
                table.add_row(*_text(v.get("value"), fam.get("family", fam.get("cue")),
                                     fam.get("count"), f"{float(fam.get('decay', 0)):.2f}",
                                     f"{float(fam.get('contribution', 0)):.2f}"))
        out.print(table)
    if got["rules"]:
        rules = Table("tool", "priority", "rule", "tags", title="Tool rules",
                      title_justify="left")
        for r in got["rules"]:
            rules.add_row(*_text(r["tool_name"], r["priority"], r["rule"], ", ".join(r["tags"])))
        out.print(rules)
    if got["habits"]:
        habits = Table("when", "do", "status", "review", "origin", "support",
                       title="Habits", title_justify="left")
        for h in got["habits"]:
            habits.add_row(*_text(h["when"], h["do"], h["status"], h["review_status"],
                                  h["origin"], f"{h['support']} obs / {h['days']} days"))
        out.print(habits)
    context = got["context"]
    if context is not None:
        steered = ", ".join(context["steered_by"]) or "no habit"
        out.print(Panel(Text(context["text"].rstrip() or "(empty)"),
                        title=Text(f"prompt.context for {user.sample_request!r} "
                                   f"(steered by: {steered})"), expand=False))
    routes = Table("model", "agent", "traces", "success", "feedback",
                   title="traces.route_stats", title_justify="left")
    for row in got["route_stats"].get("routes", []):
        feedback = row.get("avg_feedback")
        routes.add_row(*_text(row.get("model"), row.get("agent"),
                              row.get("count", row.get("traces")),
                              f"{float(row.get('success_rate', 0)):.0%}",
                              "-" if feedback is None else f"{float(feedback):.2f}"))
    out.print(routes)


def show_routing(out: Console, tenant: Any, decisions: list[dict[str, Any]]) -> None:
    table = Table("query", "class", "heuristic", "learned", "why",
                  title=Text(f"router.select_model for {tenant.tenant_id}"),
                  title_justify="left")
    for d in decisions:
        query = d["expected"].query
        table.add_row(*_text(query if len(query) < 40 else query[:37] + "...",
                             d["query_class"], d["heuristic"]["model"], d["learned"]["model"],
                             d["learned"]["reason"]))
    out.print(table)


def next_steps(out: Console, base_url: str, keys: dict[str, str], scenario: Scenario,
               data_dir: Path | None = None) -> None:
    """What to try on the demo's system while it runs, one unwrapped line each (to be copied).
    The `export` lines come first: without them `habitus ...` commands would find the user's
    own system (./var, port 8080, HABITUS_*_URL) instead of the demo's."""
    tenant = scenario.tenants[0]
    user = tenant.users[0]
    key = keys[tenant.tenant_id]
    lines = [f"export HABITUS_URL={base_url}"]
    if data_dir is not None:
        lines.append(f"export HABITUS_DATA_DIR={data_dir}   # the demo's data, kept after "
                     f"Ctrl-C: rm -rf it when done")
    lines.append(f"export HABITUS_API_KEY={key}   # tenant {tenant.tenant_id}")
    shadowing = [v for v in ("HABITUS_NATS_URL", "HABITUS_DATABASE_URL", "HABITUS_REDIS_URL")
                 if os.environ.get(v, "").strip()]
    if shadowing:
        lines.append(f"unset {' '.join(shadowing)}   # they name your own system's servers")
    lines += [
        f"curl -s $HABITUS_URL/v1/users/{user.user_id}/profile.md -H \"Authorization: Bearer "
        f"$HABITUS_API_KEY\"",
        f"curl -s -X POST $HABITUS_URL/v1/rpc/prompt.context -H \"Authorization: Bearer "
        f"$HABITUS_API_KEY\" -d '{{\"user_id\": \"{user.user_id}\", \"request\": "
        f"\"{user.sample_request}\"}}'",
        f"habitus rules list --user {user.user_id}",
        "habitus traces stats",
        "habitus route 'def f(x): return x' --models qwen2.5-coder:7b,llama3.1:70b "
        "--policy learned",
        "# keys of the other tenants: " + ", ".join(f"{t}={k}" for t, k in keys.items()
                                                     if t != tenant.tenant_id),
    ]
    out.rule("Still running (Ctrl-C stops it): try", align="left")
    for line in lines:
        out.print(Text(f"  {line}"), soft_wrap=True)
