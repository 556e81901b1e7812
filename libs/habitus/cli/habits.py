"""`habitus habits`: a user's reviewed "When / Do" habits, the review list, and approving or
rejecting one, through the gateway with an API key (`habits.*`).

A change names the habit's checksum as last read; these commands read it themselves just before
the change (by the review number or the habit id), so a habit that changed in between is still
a conflict (409), never overwritten.

An empty list says why when the reason is known. Habits are proposed by Analyze, which needs an
LLM; without one nothing is ever proposed, and "no habits" alone would read as "nothing learned
yet". The habits service says so itself: `habits.list` answers `proposals_off` with the reason.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.gateway import Gateway, Key, Tenant, Url, fail
from habitus.cli.output import console, echo_json

habits_app = typer.Typer(help="Reviewed habits (through the gateway, with an API key).",
                         no_args_is_help=True)

User = Annotated[str, typer.Option("--user", help="the user")]
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
Number = Annotated[int | None, typer.Argument(
    help="the habit's number in `habitus habits review`")]
HabitOpt = Annotated[str | None, typer.Option("--habit", help="the habit id (instead of a "
                                                              "review number)")]
Reason = Annotated[str | None, typer.Option("--reason", help="why, for the audit trail")]


def _state(h: dict[str, Any]) -> str:
    blocked = f", waits for {', '.join(h['blocked_by'])}" if h["blocked_by"] else ""
    return f"{h['status']} / {h['review_status']}{blocked}"


@habits_app.command("list")
def list_habits(user: User,
                status: Annotated[str | None, typer.Option(
                    "--status", help="only habits in this status (candidate, active, dormant, "
                                     "archived, suppressed_by_law, disabled)")] = None,
                as_json: AsJson = False, url: Url = None, key: Key = None,
                tenant: Tenant = None) -> None:
    """Every habit of the user, with its status and where it stands in review."""
    gateway = Gateway(url, key, tenant)
    params: dict[str, Any] = {"user_id": user, **({"status": status} if status else {})}
    answer = gateway.call("habits.list", params)
    habits = answer["habits"]
    if as_json:
        echo_json(habits)
        return
    if not habits:
        what = f"no {status} habits" if status else "no habits"
        console.print(f"{what} for {user}{without_llm(answer.get('proposals_off'))}",
                      soft_wrap=True)
        return
    table = Table("id", "When", "Do", "status", "approved", "confidence", "support")
    for h in habits:
        table.add_row(h["habit_id"], h["when"], ("avoid: " if h["polarity"] < 0 else "")
                      + h["do"], _state(h), "yes" if h["approved"] else "no",
                      f"{h['confidence_bp'] / 100:.0f}%", f"{h['support']} / {h['days']} d")
    console.print(table)


def without_llm(reason: str | None) -> str:
    """`: nothing can be proposed without an LLM (...)` when the habits service says it cannot
    propose (its `habits.list` answer's `proposals_off`), else ""."""
    if not reason:
        return ""
    return (f": nothing can be proposed without an LLM ({reason}). Set HABITUS_LLM_BASE_URL "
            "(an OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1) and "
            "HABITUS_LLM_MODEL where the habits service runs, and restart it")


def review_lines(review: dict[str, Any]) -> list[str]:
    """The review list as a person reads it: `1. When: ... / Do: ...`, its state, and the
    numbers of its possible duplicates."""
    lines: list[str] = []
    for item in review["items"]:
        h = item["habit"]
        first, *rest = item["text"].splitlines() or [""]
        lines.append(f"{item['number']}. {first}")
        lines.extend(f"   {line}" for line in rest)
        notes = [_state(h), h["habit_id"]]
        if item["duplicates"]:
            notes.append("possible duplicate of "
                         + ", ".join(f"#{n}" for n in item["duplicates"]))
        if item["similar"]:
            notes.append("similar to " + ", ".join(f"#{n}" for n in item["similar"]))
        lines.append("   " + "; ".join(notes))
    if review["pending_duplicates"]:
        lines.append(f"{review['pending_duplicates']} duplicate pair(s) wait for a decision")
    return lines


@habits_app.command("review")
def review(user: User, as_json: AsJson = False, url: Url = None, key: Key = None,
           tenant: Tenant = None) -> None:
    """The numbered review list: candidates and what waits for a duplicate decision."""
    gateway = Gateway(url, key, tenant)
    result = gateway.call("habits.list_review", {"user_id": user})
    if as_json:
        echo_json(result)
        return
    if not result["items"]:
        listed = gateway.probe("habits.list", {"user_id": user})
        reason = listed.get("proposals_off") if isinstance(listed, dict) else None
        console.print(f"nothing to review for {user}{without_llm(reason)}", soft_wrap=True)
        return
    for line in review_lines(result):
        console.print(line, soft_wrap=True)


def resolve(user: str, number: int | None, habit_id: str | None, gateway: Gateway
            ) -> dict[str, Any]:
    """The habit as it is now (with its current checksum), by review number or id."""
    if (number is None) == (habit_id is None):
        raise fail("give the habit's review number or --habit ID (one of them)")
    if habit_id is not None:
        return dict(gateway.call("habits.get", {"user_id": user, "habit_id": habit_id})
                    ["habit"])
    items = gateway.call("habits.list_review", {"user_id": user})["items"]
    for item in items:
        if item["number"] == number:
            return dict(item["habit"])
    raise fail(f"no habit numbered {number} in the review list of {user} "
               f"({len(items)} item(s)); see `habitus habits review --user {user}`")


def _apply(action: str, user: str, number: int | None, habit_id: str | None,
           reason: str | None, gateway: Gateway) -> None:
    habit = resolve(user, number, habit_id, gateway)
    params: dict[str, Any] = {"user_id": user, "habit_id": habit["habit_id"],
                              "checksum": habit["checksum"], "action": action,
                              **({"reason": reason} if reason else {})}
    result = gateway.call("habits.apply_review", params)
    after = result["habit"]
    console.print(f"{action}: {after['habit_id']} ({after['when']} / Do: {after['do']})"
                  f" -> {result['outcome']}; now {_state(after)}", soft_wrap=True)


@habits_app.command("approve")
def approve(user: User, number: Number = None, habit_id: HabitOpt = None,
            reason: Reason = None, url: Url = None, key: Key = None,
            tenant: Tenant = None) -> None:
    """Approve a candidate (it becomes active once nothing else holds it back)."""
    _apply("approve", user, number, habit_id, reason, Gateway(url, key, tenant))


@habits_app.command("reject")
def reject(user: User, number: Number = None, habit_id: HabitOpt = None,
           reason: Reason = None, url: Url = None, key: Key = None,
           tenant: Tenant = None) -> None:
    """Reject a candidate."""
    _apply("reject", user, number, habit_id, reason, Gateway(url, key, tenant))
