"""Turning POSTed items into events: pure, so every rejection rule is unit-tested without I/O.

The tenant never comes from the item: it comes from the API key. An item may repeat it, but a
different one is rejected rather than silently rewritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from habitus.events import CATALOG, Catalog, Event, EventValidationError, FieldError
from habitus.ids import check_event_id, new_event_id

ITEM_KEYS = frozenset(
    {
        "type",
        "user_id",
        "payload",
        "event_id",
        "occurred_at",
        "schema_version",
        "causation_id",
        "correlation_id",
        "producer",
        "tenant_id",
    }
)


@dataclass
class ItemOutcome:
    index: int
    type: str | None
    event: Event[Any] | None = None
    errors: list[FieldError] = field(default_factory=list)
    too_large: bool = False

    @property
    def ok(self) -> bool:
        return self.event is not None


def _encoded_size(item: dict[str, Any]) -> int:
    return len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode())


def build_event(
    item: Any,
    *,
    index: int,
    tenant_id: str,
    now: float,
    max_item_bytes: int | None,
    default_producer: str = "gateway",
    catalog: Catalog = CATALOG,
) -> ItemOutcome:
    """One item → an event or its errors. `max_item_bytes=None` means the caller already knows
    the item fits (its whole body is under the limit), so it is not re-encoded to measure it."""
    if not isinstance(item, dict):
        return ItemOutcome(index, None, errors=[FieldError("item", "must be a JSON object")])
    type_name = item.get("type") if isinstance(item.get("type"), str) else None
    size = 0 if max_item_bytes is None else _encoded_size(item)
    if max_item_bytes is not None and size > max_item_bytes:
        return ItemOutcome(
            index, type_name, too_large=True,
            errors=[FieldError("item", f"is {size} bytes; the limit is {max_item_bytes}")],
        )
    unknown = sorted(set(item) - ITEM_KEYS)
    if unknown:
        return ItemOutcome(
            index, type_name, errors=[FieldError(k, "unknown field") for k in unknown]
        )
    if "type" not in item:
        return ItemOutcome(index, None, errors=[FieldError("type", "field required")])
    if type_name is None or type_name not in catalog:
        return ItemOutcome(index, type_name, errors=[FieldError(
            "type", f"unknown event type {item.get('type')!r}; ingest types are "
            + ", ".join(catalog.ingest_types()))])
    if catalog.spec(type_name).stream != "ingest":
        return ItemOutcome(index, type_name, errors=[FieldError(
            "type", f"{type_name} is published by Habitus itself, not ingested")])
    if "tenant_id" in item and item["tenant_id"] != tenant_id:
        return ItemOutcome(index, type_name, errors=[FieldError(
            "tenant_id", "does not match the tenant of the API key")])
    if "user_id" not in item:
        return ItemOutcome(index, type_name, errors=[FieldError("user_id", "field required")])
    body = dict(item)
    body["tenant_id"] = tenant_id
    if "event_id" in body:
        try:
            body["event_id"] = check_event_id(body["event_id"])
        except ValueError as exc:
            return ItemOutcome(index, type_name, errors=[FieldError("event_id", str(exc))])
    else:
        body["event_id"] = new_event_id()
    body.setdefault("occurred_at", now)
    body.setdefault("producer", default_producer)
    body.setdefault("schema_version", 1)
    try:
        return ItemOutcome(index, type_name, event=catalog.decode(body))
    except EventValidationError as exc:
        return ItemOutcome(index, type_name, errors=exc.errors)
