"""`make demo`: a short, realistic session through the gateway, then what Habitus learned.

A newcomer should see, within a minute of typing `make demo`, the point of the system: a few
plain sentences and a connected account become facets, a PROFILE.md and the prompt section an
agent would get. Everything goes through the public HTTP API with the dev key, exactly as an
integrator's agent would send it; nothing is written behind the gateway's back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

USER = "sam"

#: what the session below must teach, as `prompt.context` shows it
EXPECTED = (
    "**style/verbosity**: terse",
    "**style/preamble**: skip",
    "**identity/team**: platform",
    "**identity/name**: Sam Okafor",
    "**identity/timezone**: America/Chicago",
)


def session_turns(user: str, said: Sequence[tuple[str, str]], *, start: float,
                  session_id: str, channel: str, reply_after: float = 3.0,
                  next_after: float = 15.0) -> list[dict[str, Any]]:
    """`TurnRecorded` items for (message, reply) pairs, timed like a real session: each reply
    `reply_after` s after its message, the next message `next_after` s after the last one, and
    each turn saying when the previous reply came (so a quick correction reads as one)."""
    items: list[dict[str, Any]] = []
    at, previous = start, None
    for n, (message, reply) in enumerate(said, start=1):
        payload: dict[str, Any] = {
            "session_id": session_id, "turn_id": f"t{n}", "channel": channel,
            "user_message": message, "assistant_message": reply,
            "user_at": at, "assistant_at": at + reply_after, "tool_calls": [],
        }
        if previous is not None:
            payload["previous_assistant_at"] = previous
        items.append({"type": "TurnRecorded", "user_id": user, "payload": payload})
        previous, at = at + reply_after, at + next_after
    return items


def session(user: str, now: float) -> list[dict[str, Any]]:
    """A developer's first morning with an agent: corrections, a standing request, a sent
    email, a connected Google account."""
    said = [
        ("Can you help me set up the deploy script? Keep your answers short, no preamble.",
         "Sure! Deploy scripts can be written in many ways. First, let us consider..."),
        ("Too long. Shorter please, just code.", "#!/bin/sh\nset -e\n./build && ./ship"),
        ("From now on I work on the platform team, remember that.", "Noted."),
        ("No nested bullets please.", "- build\n  - compile\n  - test"),
        ("Thanks, that works.", "Glad it helped."),
    ]
    items = session_turns(user, said, start=now - 300.0, session_id="demo-1", channel="cli")
    at = now - 300.0 + 15.0 * len(said)
    items.append({"type": "EmailObserved", "user_id": user, "payload": {
        "message_id": "<demo-1@example.com>", "direction": "sent", "from": "sam@example.com",
        "to": ["ops@example.com"], "subject": "Deploy window",
        "body": "Hi team,\n\nDeploying at 4pm today.\n\nBest,\nSam Okafor\nPlatform Engineer",
        "sent_at": at}})
    items.append({"type": "ProviderProfileSynced", "user_id": user, "payload": {
        "toolkit": "googlesuper", "connection_id": "demo-google",
        "fields": {"name": "Sam Okafor", "email": "sam@example.com",
                   "timezone": "America/Chicago"}}})
    return items


def run_demo(base_url: str, key: str, *, console: Console | None = None,
             timeout: float = 30.0, clock: Callable[[], float] = time.monotonic) -> bool:
    """Replay the session, wait until the prompt shows what it teaches, print it all.

    Returns whether everything expected appeared within `timeout` seconds."""
    out = console or Console()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=15.0, trust_env=False
                      ) as client:
        items = session(USER, time.time())
        answer = client.post("/v1/events", json=items)
        answer.raise_for_status()
        out.print(f"  demo: sent {len(items)} reports for user '{USER}' "
                  f"({answer.json()['accepted']} accepted)")
        started = clock()
        text = ""
        while clock() - started < timeout:
            text = _rpc(client, "prompt.context")["text"]
            if all(line in text for line in EXPECTED):
                break
            time.sleep(0.25)
        learned_in = clock() - started
        facets = _rpc(client, "learning.list_facets")["facets"]
        profile = client.get(f"/v1/users/{USER}/profile.md").text
    table = Table("class", "key", "value", "state", "set by", title=f"Facets of '{USER}'")
    for facet in facets:
        set_by = "the user" if facet["user_state"] == "pinned" else (
            "their account" if facet["stability"] is None else "learned")
        table.add_row(facet["class"], facet["key"], facet["value"], facet["state"], set_by)
    out.print(table)
    out.print(Panel(profile.rstrip(), title="PROFILE.md"))
    out.print(Panel(text.rstrip() or "(empty)", title="prompt.context"))
    missing = [line for line in EXPECTED if line not in text]
    if missing:
        out.print(f"[red]  demo: not learned within {timeout:.0f} s: {', '.join(missing)}")
        return False
    out.print(f"  demo: learned in {learned_in:.1f} s after the last report")
    return True


def _rpc(client: httpx.Client, method: str) -> Any:
    response = client.post(f"/v1/rpc/{method}", json={"user_id": USER})
    response.raise_for_status()
    return response.json()["result"]
