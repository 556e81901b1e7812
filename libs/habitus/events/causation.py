"""Events caused by other events: ids derived from the cause, causation and correlation kept.

A projection that publishes a consequence must publish the same event id every time it applies
the same cause (a redelivery, a replay), so the stream and every reader drop the copy; and the
trail back to what the user did (causation, correlation) must not depend on who wrote it.
"""

from __future__ import annotations

from typing import Any

from habitus.events.catalog import CATALOG
from habitus.events.envelope import Event, Payload
from habitus.ids import derived_event_id


def caused(cause: Event[Any], payload: Payload, *, producer: str, key: tuple[str, ...] = (),
           tenant_id: str | None = None, user_id: str | None = None,
           occurred_at: float | None = None, event_id: str | None = None) -> Event[Any]:
    """`payload` as a consequence of `cause`.

    The id derives from the cause's id, the new event's type and `key` (what tells apart two
    consequences of the same type from one cause); `event_id` replaces it where a producer
    derives its own. The tenant and user are the cause's unless given (a periodic rebuild
    causes one event per user it rebuilt); the time is the cause's unless given."""
    spec = CATALOG.spec_for(payload)
    return CATALOG.new(
        payload,
        tenant_id=cause.tenant_id if tenant_id is None else tenant_id,
        user_id=cause.user_id if user_id is None else user_id,
        producer=producer,
        occurred_at=cause.occurred_at if occurred_at is None else occurred_at,
        event_id=event_id or derived_event_id(cause.event_id, spec.type, *key),
        causation_id=cause.event_id,
        correlation_id=cause.correlation_id or cause.event_id,
    )
