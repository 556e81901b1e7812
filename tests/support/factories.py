"""Event factories for tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from habitus.events import CATALOG, Event
from habitus.events.ingest import TurnRecorded

_counter = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def turn(tenant_id: str, user_id: str, message: str = "hello", *, event_id: str | None = None,
         session_id: str = "s1", at: float | None = None) -> Event[Any]:
    n = next(_counter)
    t = float(at if at is not None else 1_700_000_000 + n)
    return CATALOG.new(
        TurnRecorded(
            session_id=session_id,
            turn_id=f"t{n}",
            channel="web",
            user_message=message,
            assistant_message="ok",
            user_at=t,
            assistant_at=t + 1,
        ),
        tenant_id=tenant_id,
        user_id=user_id,
        producer="tests",
        occurred_at=t,
        event_id=event_id,
    )


def turn_item(user_id: str = "u1", message: str = "hello", **extra: Any) -> dict[str, Any]:
    """An ingest item as an agent would POST it."""
    n = next(_counter)
    item: dict[str, Any] = {
        "type": "TurnRecorded",
        "user_id": user_id,
        "payload": {
            "session_id": "s1",
            "turn_id": f"t{n}",
            "channel": "web",
            "user_message": message,
            "assistant_message": "ok",
            "user_at": 1_700_000_000.0 + n,
            "assistant_at": 1_700_000_001.0 + n,
        },
    }
    item.update(extra)
    return item
