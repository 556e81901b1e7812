"""The demo's scenario, loaded from the repository: `examples/scenarios/three_weeks.py` (two
tenants, four users, each with a story and its expected outcome), and its items in the order
they happened.

The scenario is not part of the installed package (it is an example anyone can read and
change), so it is imported from the checkout this package runs from (an editable install), with
a clear error when it is not there. `session_turns` builds the `TurnRecorded` items of one
timed session, for the scenario's shape of test (tests/e2e) as much as for the demo.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the repository checkout this module runs from (an editable install:
#: libs/habitus/demo/scenario.py)
REPO = Path(__file__).resolve().parents[3]
SCENARIO = "examples.scenarios.three_weeks"

Scenario = Any  # examples.scenarios.three_weeks.Scenario (outside the typed package)


def import_example(name: str) -> Any:
    """The module `name` of the repository's examples (the scenario, its scripted model)."""
    if str(REPO) not in sys.path and (REPO / "examples" / "scenarios").is_dir():
        sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise RuntimeError(f"the demo needs the repository's examples/scenarios ({REPO}): "
                           f"{exc}") from exc


def build_scenario(now: float | None = None, tenants: dict[str, str] | None = None
                   ) -> Scenario:
    return import_example(SCENARIO).build(time.time() if now is None else now, tenants)


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


def ordered_items(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    """Every tenant's items, as (tenant, item), in the order they happened."""
    pairs = [(t.tenant_id, item) for t in scenario.tenants for item in scenario.items(t)]
    return sorted(pairs, key=lambda pair: _item_time(pair[1]))


def _item_time(item: dict[str, Any]) -> float:
    p = item["payload"]
    for key in ("user_at", "sent_at", "started_at", "synced_at"):
        if key in p:
            return float(p[key])
    return float(item.get("occurred_at", 0.0))
